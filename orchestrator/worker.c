/* worker: being written. */
