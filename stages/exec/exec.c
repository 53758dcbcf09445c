/* exec stage: being written. */
