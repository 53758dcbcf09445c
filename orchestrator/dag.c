/* dag: being written. */
