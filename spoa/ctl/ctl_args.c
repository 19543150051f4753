/*
 * ctl_args - `ratelimit-spoa ctl`'s command line (ctl_args.h). Pure.
 */
#include <stdio.h>
#include <string.h>

#include "ctl_args.h"
#include "decimal.h"

static const char *const ctl_names[CTL_CMD_COUNT] = {
	[CTL_CMD_NONE] = "",
	[CTL_CMD_SHOW] = "show",
	[CTL_CMD_RESET] = "reset",
	[CTL_CMD_OVERRIDE] = "override",
	[CTL_CMD_OVERRIDES] = "overrides",
	[CTL_CMD_TOP_DENIED] = "top-denied",
	[CTL_CMD_SHOW_POOL] = "show-pool",
};

static const char *const ctl_usages[CTL_CMD_COUNT] = {
	[CTL_CMD_NONE] =
"Usage: ratelimit-spoa ctl [-c FILE] COMMAND [ARGS] [--json]\n"
"\n"
"Live control of the accounts, in the Redis the agents' configuration FILE\n"
"names (default " CTL_DEFAULT_CONFIG "), with its\n"
"credentials and TLS settings: redis://, unix://, sentinel://, cluster://.\n"
"\n"
"Commands:\n"
"  show POLICY ACCOUNT          the account's windows: used, remaining, reset;\n"
"                               and its live override (read-only)\n"
"  reset POLICY ACCOUNT         delete the account's windows under POLICY\n"
"                               (a pool keeps the units it counted)\n"
"  override POLICY ACCOUNT LIMIT/WINDOW [LIMIT/WINDOW...]|block --for DURATION\n"
"           [--reason TEXT]     a temporary override every agent applies\n"
"                               within 1 s; never above the policy's ceiling\n"
"  override POLICY ACCOUNT --remove   end it now\n"
"  overrides                    the live overrides: time left, who, why\n"
"  top-denied [--minutes N] [--policy P] [--count K]\n"
"                               the most-denied accounts of the last minutes\n"
"  show-pool POOL [--top N]     a pool: used, remaining, accounts holding\n"
"                               units, the N holding most (read-only)\n"
"\n"
"Options: -c, --config FILE; --json (show, overrides, top-denied, show-pool);\n"
"-h, --help (also after a command). Exit status: 0 done, 1 refused or failed,\n"
"2 bad usage. What a change did is written on stderr; agents log it too.\n"
"Text output escapes names: \\\\ \\\" and \\xHH for control bytes and non-UTF-8.\n",
	[CTL_CMD_SHOW] =
"Usage: ratelimit-spoa ctl [-c FILE] show POLICY ACCOUNT [--plan NAME] [--json]\n"
"\n"
"The account's state under POLICY, read from Redis without changing it:\n"
"per window its limit, the units used in it now, the units remaining and\n"
"the seconds until the oldest counted unit leaves (reset); the limits that\n"
"apply (the policy's, a config override's, or a live override's) and any\n"
"live override with its time left, who set it and why. ACCOUNT is the key\n"
"HAProxy sends, with its kind: jwt:ACC-1001. A plan is known per request:\n"
"--plan NAME shows the account under usage plan NAME (what a request naming\n"
"it gets); the policy's plans are listed.\n",
	[CTL_CMD_RESET] =
"Usage: ratelimit-spoa ctl [-c FILE] reset POLICY ACCOUNT\n"
"\n"
"Delete every window of ACCOUNT under POLICY (the policy's, its config\n"
"override's, its live override's and its plans' key forms): the account\n"
"starts afresh.\n"
"An operator's explicit act, logged by every agent as event=live_reset.\n"
"A pooled policy's pool keeps the units the account holds in it until they\n"
"leave its window (taking them out exactly would rewrite every later entry\n"
"of the pool's log); ctl says how many on stderr.\n",
	[CTL_CMD_OVERRIDE] =
"Usage: ratelimit-spoa ctl [-c FILE] override POLICY ACCOUNT LIMIT/WINDOW\n"
"           [LIMIT/WINDOW...] --for DURATION [--reason TEXT]\n"
"       ratelimit-spoa ctl [-c FILE] override POLICY ACCOUNT block --for DURATION\n"
"           [--reason TEXT]\n"
"       ratelimit-spoa ctl [-c FILE] override POLICY ACCOUNT --remove\n"
"\n"
"Set, replace or remove a live override of one account, stored in Redis\n"
"until it expires (DURATION: 30s, 10m, 2h, 1d; at most 7d) and applied by\n"
"every agent within 1 s, without a reload. It wins over a config override\n"
"while it lasts. Limits may lower the account's configured limits freely;\n"
"above them only up to the policy's live-max (the agents check it too).\n"
"block answers every request 429 with reason=blocked, without Redis.\n",
	[CTL_CMD_OVERRIDES] =
"Usage: ratelimit-spoa ctl [-c FILE] overrides [--json]\n"
"\n"
"The live overrides in effect: policy, account, limits or block, time left,\n"
"who set them (user@host) and why.\n",
	[CTL_CMD_TOP_DENIED] =
"Usage: ratelimit-spoa ctl [-c FILE] top-denied [--minutes N] [--policy P]\n"
"           [--count K] [--json]\n"
"\n"
"The accounts denied most in the last N minutes (1..60, default 5; the\n"
"current minute included), K of them (default 10), all policies or P's:\n"
"the counts every agent adds up and writes each second. A pool's refusals\n"
"are counted apart: policy P/pool-full or P/pool-share (--json: reason\n"
"pool-full, pool-share; account for the account's own limits or a block).\n",
	[CTL_CMD_SHOW_POOL] =
"Usage: ratelimit-spoa ctl [-c FILE] show-pool POOL [--top N] [--json]\n"
"\n"
"A pool's state, read from Redis without changing it, as its next decision\n"
"counts it: its limit, window and headroom (the configuration's), the units\n"
"used in its window now, remaining, the seconds until the oldest leaves\n"
"(reset), the policies naming it, the accounts holding units in it and the\n"
"N (1..1000, default 10) holding most: their units, their part of the used\n"
"units, and whether they are at or above their fair share (then they may\n"
"not take the headroom).\n",
};

/* See ctl_args.h; static storage, nothing allocated. */
const char *ctl_cmd_name(enum ctl_cmd c)
{
	return (unsigned)c < CTL_CMD_COUNT ? ctl_names[c] : "";
}

/* See ctl_args.h; static storage, nothing allocated. */
const char *ctl_usage(enum ctl_cmd c)
{
	return ctl_usages[(unsigned)c < CTL_CMD_COUNT ? c : CTL_CMD_NONE];
}

/* <s> as 1..<max> into <*out>; 0 or -1. */
static int ctl_uint(const char *s, unsigned max, unsigned *out)
{
	uint64_t v;

	if (decimal_parse(s, strlen(s), max, &v) != 0 || v == 0)
		return -1;
	*out = (unsigned)v;
	return 0;
}

/* The positional words of the command: policy, account, then (override)
 * the limits or "block". Returns 0 or -1 with <err>. */
static int ctl_positional(struct ctl_args *a, unsigned nth, const char *w, char *err,
                          size_t errlen)
{
	struct live_rule *r = &a->rule;
	char why[128];

	if (nth == 0 && a->cmd == CTL_CMD_SHOW_POOL) {
		a->pool = w;
		return 0;
	}
	if (nth == 0 && (a->cmd == CTL_CMD_SHOW || a->cmd == CTL_CMD_RESET ||
	                 a->cmd == CTL_CMD_OVERRIDE)) {
		a->policy = w;
		return 0;
	}
	if (nth == 1 && a->policy) {
		if (window_check_key(w, strlen(w)) == -1) {
			snprintf(err, errlen, "account must be 1..%d bytes", WINDOW_KEY_MAX);
			return -1;
		}
		a->account = w;
		return 0;
	}
	if (nth >= 2 && a->cmd == CTL_CMD_OVERRIDE && !r->block) {
		if (strcmp(w, "block") == 0 && r->nwin == 0) {
			r->block = true;
			return 0;
		}
		if (live_rule_parse_limit(w, strlen(w), r->win, &r->nwin, why, sizeof(why)) == 0)
			return 0;
		snprintf(err, errlen, "override: %s", why);
		return -1;
	}
	snprintf(err, errlen, "%s: unexpected argument '%s'", ctl_cmd_name(a->cmd), w);
	return -1;
}

/* Is option <o> allowed with <c>? */
static int ctl_option_ok(enum ctl_cmd c, const char *o)
{
	if (strcmp(o, "--json") == 0)
		return c == CTL_CMD_SHOW || c == CTL_CMD_OVERRIDES || c == CTL_CMD_TOP_DENIED ||
		       c == CTL_CMD_SHOW_POOL;
	if (strcmp(o, "--top") == 0)
		return c == CTL_CMD_SHOW_POOL;
	if (!strcmp(o, "--for") || !strcmp(o, "--reason") || !strcmp(o, "--remove"))
		return c == CTL_CMD_OVERRIDE;
	if (!strcmp(o, "--plan"))
		return c == CTL_CMD_SHOW;
	if (!strcmp(o, "--minutes") || !strcmp(o, "--policy") || !strcmp(o, "--count"))
		return c == CTL_CMD_TOP_DENIED;
	return 0;
}

/* See ctl_args.h: <a> borrows <argv>'s strings, copies into <a>->rule. */
int ctl_parse_args(int argc, char **argv, struct ctl_args *a, char *err, size_t errlen)
{
	unsigned nth = 0, c;
	int i;

	memset(a, 0, sizeof(*a));
	a->config = CTL_DEFAULT_CONFIG;
	a->reason = "";
	a->minutes = 5;
	a->count = 10;
	a->top = 10;
	for (i = 1; i < argc; i++) {
		const char *w = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(w, "-h") || !strcmp(w, "--help")) {
			a->help = true;
			return 0;
		}
		if (a->cmd == CTL_CMD_NONE) {
			if (!strcmp(w, "-c") || !strcmp(w, "--config")) {
				if (!v) {
					snprintf(err, errlen, "%s needs a file", w);
					return -1;
				}
				a->config = v;
				i++;
				continue;
			}
			for (c = 1; c < CTL_CMD_COUNT && strcmp(w, ctl_names[c]); c++)
				;
			if (c == CTL_CMD_COUNT) {
				snprintf(err, errlen, "unknown command '%s' (show, reset, override, "
				         "overrides, top-denied, show-pool)", w);
				return -1;
			}
			a->cmd = (enum ctl_cmd)c;
			continue;
		}
		if (w[0] == '-' && w[1] == '-') {
			if (!ctl_option_ok(a->cmd, w)) {
				snprintf(err, errlen, "%s: unknown option '%s'", ctl_names[a->cmd], w);
				return -1;
			}
			if (!strcmp(w, "--json")) {
				a->json = true;
				continue;
			}
			if (!strcmp(w, "--remove")) {
				a->remove = true;
				continue;
			}
			if (!v) {
				snprintf(err, errlen, "%s needs a value", w);
				return -1;
			}
			i++;
			if (!strcmp(w, "--for") && live_rule_parse_for(v, strlen(v), &a->for_ms) == -1) {
				snprintf(err, errlen, "--for: '%s' is not a duration of 1s..7d "
				         "(30s, 10m, 2h, 1d)", v);
				return -1;
			}
			if (!strcmp(w, "--reason")) {
				if (strlen(v) > LIVE_REASON_MAX) {
					snprintf(err, errlen, "--reason: at most %d bytes", LIVE_REASON_MAX);
					return -1;
				}
				a->reason = v;
			}
			if (!strcmp(w, "--minutes") && ctl_uint(v, CTL_MINUTES_MAX, &a->minutes) == -1) {
				snprintf(err, errlen, "--minutes: 1..%u", CTL_MINUTES_MAX);
				return -1;
			}
			if (!strcmp(w, "--count") && ctl_uint(v, CTL_COUNT_MAX, &a->count) == -1) {
				snprintf(err, errlen, "--count: 1..%u", CTL_COUNT_MAX);
				return -1;
			}
			if (!strcmp(w, "--top") && ctl_uint(v, CTL_COUNT_MAX, &a->top) == -1) {
				snprintf(err, errlen, "--top: 1..%u", CTL_COUNT_MAX);
				return -1;
			}
			if (!strcmp(w, "--policy"))
				a->only_policy = v;
			if (!strcmp(w, "--plan"))
				a->plan = v;
			continue;
		}
		if (ctl_positional(a, nth++, w, err, errlen) == -1)
			return -1;
	}
	if (a->cmd == CTL_CMD_NONE) {
		a->help = true;
		return 0;
	}
	if ((a->cmd == CTL_CMD_SHOW || a->cmd == CTL_CMD_RESET || a->cmd == CTL_CMD_OVERRIDE) &&
	    !a->account) {
		snprintf(err, errlen, "%s: expected POLICY ACCOUNT", ctl_names[a->cmd]);
		return -1;
	}
	if (a->cmd == CTL_CMD_SHOW_POOL && !a->pool) {
		snprintf(err, errlen, "show-pool: expected POOL");
		return -1;
	}
	if (a->cmd != CTL_CMD_OVERRIDE)
		return 0;
	if (a->remove) {
		if (a->rule.block || a->rule.nwin || a->for_ms) {
			snprintf(err, errlen, "override --remove takes no limits and no --for");
			return -1;
		}
	} else if (!a->rule.block && a->rule.nwin == 0) {
		snprintf(err, errlen, "override: expected LIMIT/WINDOW... or block");
		return -1;
	} else if (!a->for_ms) {
		snprintf(err, errlen, "override: --for DURATION is required (an override always expires)");
		return -1;
	}
	a->rule.policy_len = strlen(a->policy);
	a->rule.key_len = strlen(a->account);
	if (a->rule.policy_len > WINDOW_NAME_MAX) {
		snprintf(err, errlen, "policy name too long");
		return -1;
	}
	memcpy(a->rule.policy, a->policy, a->rule.policy_len + 1);
	memcpy(a->rule.key, a->account, a->rule.key_len + 1);
	snprintf(a->rule.reason, sizeof(a->rule.reason), "%s", a->reason);
	return 0;
}
