/* graph: being written. */
