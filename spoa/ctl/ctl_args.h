/*
 * ctl_args - the command line of `ratelimit-spoa ctl`, parsed without I/O
 * (the commands themselves are ctl.c's).
 */
#ifndef SPOA_CTL_ARGS_H
#define SPOA_CTL_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "live_rule.h"

#define CTL_DEFAULT_CONFIG "/etc/ratelimit-spoa/ratelimit-spoa.conf"
#define CTL_MINUTES_MAX    60u
#define CTL_COUNT_MAX      1000u

enum ctl_cmd {
	CTL_CMD_NONE = 0,              /* no command: ctl --help */
	CTL_CMD_SHOW,
	CTL_CMD_RESET,
	CTL_CMD_OVERRIDE,
	CTL_CMD_OVERRIDES,
	CTL_CMD_TOP_DENIED,
	CTL_CMD_SHOW_POOL,
	CTL_CMD_COUNT
};

struct ctl_args {
	const char *config;            /* -c, default CTL_DEFAULT_CONFIG */
	enum ctl_cmd cmd;
	bool help;                     /* --help (of <cmd>, or of ctl) */
	bool json;                     /* --json: show, overrides, top-denied, show-pool */
	const char *policy;            /* show, reset, override */
	const char *account;
	struct live_rule rule;         /* override: limits or block (policy, key set) */
	bool remove;                   /* override --remove */
	uint64_t for_ms;               /* override --for */
	const char *reason;            /* override --reason, "" if none */
	unsigned minutes;              /* top-denied --minutes (default 5) */
	unsigned count;                /* top-denied --count (default 10) */
	const char *only_policy;       /* top-denied --policy, NULL: all */
	const char *pool;              /* show-pool */
	unsigned top;                  /* show-pool --top (default 10) */
	const char *plan;              /* show --plan, NULL: none */
};

/* Parse <argc>/<argv> (argv[0] is "ctl") into <a>, which borrows <argv>.
 * Returns 0, or -1 with the reason in <err>. */
int ctl_parse_args(int argc, char **argv, struct ctl_args *a, char *err, size_t errlen);

/* The name of <c> ("show", ...), "" for none. Static storage. */
const char *ctl_cmd_name(enum ctl_cmd c);

/* The --help text of <c> (CTL_CMD_NONE: ctl's). Static storage. */
const char *ctl_usage(enum ctl_cmd c);

#endif /* SPOA_CTL_ARGS_H */
