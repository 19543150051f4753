/*
 * ctl_keys - an account's Redis keys under a policy (ctl_keys.h). Pure.
 */
#include <string.h>

#include "ctl_keys.h"

/* See ctl_keys.h: borrows <p>, <win> and <key>; the names are copied into <out>. */
int ctl_keys_for(const struct window_policy *p, const struct window_limit *win, unsigned nwin,
                 const char *key, size_t key_len, struct ctl_key *out, size_t have)
{
	struct window_policy q = *p;
	struct window_args a;
	enum window_reason why;
	unsigned i;
	size_t j;

	/* the key forms follow the limits that apply, as in a decision */
	if (nwin == 0 || nwin > WINDOW_MAX_WINDOWS)
		return -1;
	q.nwin = nwin;
	memcpy(q.win, win, nwin * sizeof(*win));
	q.overrides = NULL;
	q.noverrides = 0;
	q.max_cost = 0;
	q.legacy_key = true;    /* what 1.0.x wrote is the account's too */
	/* a pool's keys are every account's: never the account's to show or
	 * delete (ctl show-pool reads them) */
	q.pooled = false;
	q.inflight = 0;         /* (its leases are no window: neither shown nor reset) */
	if (window_build_args(&q, "", key, key_len, 1, &a, &why) == -1)
		return -1;
	for (i = 0; i < a.nkeys; i++) {
		const char *k = a.argv[3 + i];
		size_t kl = a.argvlen[3 + i];
		unsigned wi = i < nwin ? i : 0;

		for (j = 0; j < have; j++)
			if (out[j].len == kl && memcmp(out[j].name, k, kl) == 0)
				break;
		if (j < have || have >= CTL_KEYS_MAX || kl >= sizeof(out[0].name))
			continue;
		memcpy(out[have].name, k, kl);
		out[have].name[kl] = '\0';
		out[have].len = kl;
		out[have].kind = win[wi].cal && i < nwin ? CTL_KEY_QUOTA :
		                 p->algorithm == WINDOW_ALGO_GCRA ? CTL_KEY_GCRA :
		                 window_is_bucketed(p, win[wi].window_ms) ? CTL_KEY_BUCKETS : CTL_KEY_LOG;
		out[have].lim = win[wi];
		out[have].legacy = i >= nwin;
		have++;
	}
	return (int)have;
}
