/* params: being written. */
