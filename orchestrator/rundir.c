/* rundir: being written. */
