/* proto: being written. */
