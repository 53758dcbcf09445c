/* catalog: being written. */
