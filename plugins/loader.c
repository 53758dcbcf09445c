/* loader: being written. */
