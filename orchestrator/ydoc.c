/* ydoc: being written. */
