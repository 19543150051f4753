/*
 * ctl - `ratelimit-spoa ctl ...`: live control of accounts (show, reset,
 * override, overrides, top-denied) in the agents' Redis.
 */
#ifndef SPOA_CTL_H
#define SPOA_CTL_H

/* Run the ctl command line <argv> (argv[0] is "ctl"). Returns the exit
 * status: 0 done, 1 refused or failed, 2 bad usage. */
int ctl_main(int argc, char **argv);

#endif /* SPOA_CTL_H */
