/* check: being written. */
