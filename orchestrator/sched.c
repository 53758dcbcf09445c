/* sched: being written. */
