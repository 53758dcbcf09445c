/* view: being written. */
