/* executor: being written. */
