/* spec: being written. */
