/* template: being written. */
