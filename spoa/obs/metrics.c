/*
 * metrics - latency histogram and Prometheus text rendering (see metrics.h).
 *
 * Rendering sums the per-thread blocks with relaxed loads and writes the
 * text exposition format 0.0.4: every family has # HELP and # TYPE, every
 * sample is "name{labels} value". Series exist from the start (zeros
 * included) so that rate() and absent() behave from the first scrape.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "metrics.h"

#define METRICS_PREFIX "ratelimit_spoa_"

/* Bucket upper bounds (le) in microseconds, and the same in seconds as
 * text: printing them from a table avoids float formatting surprises. */
static const uint64_t lat_bounds_us[METRICS_LAT_BUCKETS] = {
	100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000,
	250000, 500000, 1000000, 2500000,
};

static const char *const lat_bounds_s[METRICS_LAT_BUCKETS] = {
	"0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025",
	"0.05", "0.1", "0.25", "0.5", "1", "2.5",
};

static const uint64_t dec_bounds_us[METRICS_DEC_BUCKETS] = {
	25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000,
	250000, 500000, 1000000,
};

static const char *const dec_bounds_s[METRICS_DEC_BUCKETS] = {
	"0.000025", "0.00005", "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005",
	"0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1",
};

/* Status label of the decision histogram, by its index. */
static const char *dec_status_str(unsigned s)
{
	return s == METRICS_DEC_SHADOW_DENY ? "shadow-deny" : window_status_str((enum window_status)s);
}

static const char *const redis_err_names[METRICS_REDIS_ERR_COUNT] = {
	[METRICS_REDIS_ERR_TIMEOUT]  = "timeout",
	[METRICS_REDIS_ERR_REFUSED]  = "refused",
	[METRICS_REDIS_ERR_SCRIPT]   = "script",
	[METRICS_REDIS_ERR_NOSCRIPT] = "noscript",
	[METRICS_REDIS_ERR_OOM]      = "oom",
	[METRICS_REDIS_ERR_EVICTS]   = "evicts",
};

static const char *const reload_names[METRICS_RELOAD_COUNT] = {
	[METRICS_RELOAD_SUCCESS] = "success",
	[METRICS_RELOAD_FAILURE] = "failure",
};

/* Frame types by index of frames_in[] / frames_out[] (0 = anything else). */
static const char *const frame_in_names[METRICS_FRAMES_IN] = {
	"other", "haproxy-hello", "haproxy-disconnect", "notify",
};
static const char *const frame_out_names[METRICS_OUT_COUNT] = {
	[METRICS_OUT_OTHER]      = "other",
	[METRICS_OUT_HELLO]      = "agent-hello",
	[METRICS_OUT_DISCONNECT] = "agent-disconnect",
	[METRICS_OUT_ACK]        = "ack",
};

/* SPOP status codes as label values. Kept here rather than taken from the
 * codec so that metrics links without it. */
static const char *const spop_status_names[SPOP_ST_COUNT] = {
	[SPOP_ST_NORMAL]              = "normal",
	[SPOP_ST_IO]                  = "io-error",
	[SPOP_ST_TIMEOUT]             = "timeout",
	[SPOP_ST_TOO_BIG]             = "too-big",
	[SPOP_ST_INVALID]             = "invalid",
	[SPOP_ST_NO_VSN]              = "no-version",
	[SPOP_ST_NO_FRAME_SIZE]       = "no-frame-size",
	[SPOP_ST_NO_CAP]              = "no-capabilities",
	[SPOP_ST_BAD_VSN]             = "bad-version",
	[SPOP_ST_BAD_FRAME_SIZE]      = "bad-frame-size",
	[SPOP_ST_FRAG_NOT_SUPPORTED]  = "fragmentation-not-supported",
	[SPOP_ST_INTERLACED_FRAMES]   = "interlaced-frames",
	[SPOP_ST_FRAMEID_NOTFOUND]    = "frame-id-not-found",
	[SPOP_ST_RES]                 = "resource-allocation",
};

/* The bucket of <us> among <n> upper bounds <bounds> (le is inclusive);
 * <n> is the +Inf bucket. */
static unsigned bucket_of(const uint64_t *bounds, unsigned n, uint64_t us)
{
	unsigned i = 0;

	while (i < n && us > bounds[i])
		i++;
	return i;
}

/* Count one Redis call of <us> microseconds in <m> (this thread's block). */
void metrics_observe_redis_latency(struct metrics *m, uint64_t us)
{
	metrics_add(&m->redis_latency[bucket_of(lat_bounds_us, METRICS_LAT_BUCKETS, us)], 1);
	metrics_add(&m->redis_latency_sum_us, us);
	metrics_add(&m->redis_latency_count, 1);
}

/* Count one decision <d> of policy index <policy> taking <us> in <m>. */
void metrics_observe_decision(struct metrics *m, size_t policy, const struct window_decision *d,
                              uint64_t us)
{
	unsigned st;

	if (policy >= CONFIG_MAX_POLICIES || (unsigned)d->status >= WINDOW_STATUS_COUNT)
		return;
	st = d->reason == WINDOW_REASON_SHADOW_DENY ? METRICS_DEC_SHADOW_DENY : (unsigned)d->status;
	metrics_add(&m->decision_latency[policy][st][bucket_of(dec_bounds_us, METRICS_DEC_BUCKETS, us)], 1);
	metrics_add(&m->decision_latency_sum_us[policy][st], us);
}

/* Every counter of one policy, as moved by metrics_move_policies(). */
struct policy_row {
	uint64_t decisions[WINDOW_STATUS_COUNT];
	uint64_t shadow, cache;
	uint64_t pool[METRICS_POOL_REFUSAL_COUNT];
	uint64_t lat[METRICS_DEC_STATUS_COUNT][METRICS_DEC_BUCKETS + 1];
	uint64_t lat_sum[METRICS_DEC_STATUS_COUNT];
};

/* Copy policy <i>'s counters between <m> and <row> (<out>: from <m>). */
static void policy_row_copy(struct metrics *m, size_t i, struct policy_row *row, int out)
{
	size_t s, b;

#define MOVE(field, val) do { \
		if (out) \
			(val) = atomic_load_explicit(&m->field, memory_order_relaxed); \
		else \
			atomic_store_explicit(&m->field, (val), memory_order_relaxed); \
	} while (0)
	for (s = 0; s < WINDOW_STATUS_COUNT; s++)
		MOVE(decisions[i][s], row->decisions[s]);
	MOVE(shadow_denies[i], row->shadow);
	MOVE(cache_denies[i], row->cache);
	for (s = 0; s < METRICS_POOL_REFUSAL_COUNT; s++)
		MOVE(pool_refusals[i][s], row->pool[s]);
	for (s = 0; s < METRICS_DEC_STATUS_COUNT; s++) {
		for (b = 0; b <= METRICS_DEC_BUCKETS; b++)
			MOVE(decision_latency[i][s][b], row->lat[s][b]);
		MOVE(decision_latency_sum_us[i][s], row->lat_sum[s]);
	}
#undef MOVE
}

/* Reorder <m>'s per-policy counters by <from>; see metrics.h. */
void metrics_move_policies(struct metrics *m, const size_t *from, size_t n)
{
	/* ~40 KB: on the calling worker's stack, once per reload */
	struct policy_row rows[CONFIG_MAX_POLICIES];
	size_t j;

	memset(rows, 0, sizeof(rows));
	for (j = 0; j < n && j < CONFIG_MAX_POLICIES; j++)
		if (from[j] < CONFIG_MAX_POLICIES)
			policy_row_copy(m, from[j], &rows[j], 1);
	for (j = 0; j < CONFIG_MAX_POLICIES; j++)
		policy_row_copy(m, j, &rows[j], 0);
}

/* The text being built in the caller's buffer; <failed> once it is full. */
struct render {
	char *dst;
	size_t cap;
	size_t len;
	int failed;
};

__attribute__((format(printf, 2, 3)))
static void out(struct render *r, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (r->failed)
		return;
	va_start(ap, fmt);
	n = vsnprintf(r->dst + r->len, r->cap - r->len, fmt, ap);
	va_end(ap);
	/* Keep room for the NUL: the result is also a C string. */
	if (n < 0 || (size_t)n >= r->cap - r->len) {
		r->failed = 1;
		return;
	}
	r->len += (size_t)n;
}

/* "# HELP" and "# TYPE" of one family. */
static void family(struct render *r, const char *name, const char *type, const char *help)
{
	out(r, "# HELP " METRICS_PREFIX "%s %s\n# TYPE " METRICS_PREFIX "%s %s\n",
	    name, help, name, type);
}

/* Label value <s> escaped per the exposition format (\\, \", \n), written
 * into <dst>/<cap> (truncated, always NUL-terminated). */
static void escape_label(char *dst, size_t cap, const char *s)
{
	size_t o = 0;

	for (; *s && o + 3 < cap; s++) {
		if (*s == '\\' || *s == '"') {
			dst[o++] = '\\';
			dst[o++] = *s;
		} else if (*s == '\n') {
			dst[o++] = '\\';
			dst[o++] = 'n';
		} else {
			dst[o++] = *s;
		}
	}
	dst[o] = '\0';
}

/* *<dst> += *<src>, both read relaxed: <dst> is the caller's private total. */
static void acc(_Atomic uint64_t *dst, const _Atomic uint64_t *src)
{
	metrics_add(dst, atomic_load_explicit(src, memory_order_relaxed));
}

/* Add the counters of <m> into <t> field by field. */
static void metrics_sum_into(struct metrics *t, const struct metrics *m)
{
	size_t i, s, k;

	for (i = 0; i < CONFIG_MAX_POLICIES; i++) {
		for (s = 0; s < WINDOW_STATUS_COUNT; s++)
			acc(&t->decisions[i][s], &m->decisions[i][s]);
		acc(&t->shadow_denies[i], &m->shadow_denies[i]);
		acc(&t->cache_denies[i], &m->cache_denies[i]);
		for (s = 0; s < METRICS_POOL_REFUSAL_COUNT; s++)
			acc(&t->pool_refusals[i][s], &m->pool_refusals[i][s]);
		for (s = 0; s < METRICS_DEC_STATUS_COUNT; s++) {
			size_t b;

			for (b = 0; b <= METRICS_DEC_BUCKETS; b++)
				acc(&t->decision_latency[i][s][b], &m->decision_latency[i][s][b]);
			acc(&t->decision_latency_sum_us[i][s], &m->decision_latency_sum_us[i][s]);
		}
	}
	for (s = 0; s < WINDOW_REASON_COUNT; s++)
		acc(&t->errors_by_reason[s], &m->errors_by_reason[s]);
	for (s = 0; s <= METRICS_LAT_BUCKETS; s++)
		acc(&t->redis_latency[s], &m->redis_latency[s]);
	acc(&t->redis_latency_sum_us, &m->redis_latency_sum_us);
	acc(&t->redis_latency_count, &m->redis_latency_count);
	for (s = 0; s < METRICS_REDIS_ERR_COUNT; s++)
		acc(&t->redis_errors[s], &m->redis_errors[s]);
	acc(&t->redis_reconnects, &m->redis_reconnects);
	acc(&t->redis_connected, &m->redis_connected);
	acc(&t->redis_unsafe_eviction, &m->redis_unsafe_eviction);
	for (s = 0; s < METRICS_ENGINE_COUNT; s++)
		acc(&t->redis_engine[s], &m->redis_engine[s]);
	for (s = 0; s < METRICS_ENGINE_COUNT; s++)
		for (k = 0; k < METRICS_REPLY_COUNT; k++)
			acc(&t->redis_replies[s][k], &m->redis_replies[s][k]);
	acc(&t->late_admissions, &m->late_admissions);
	acc(&t->unknown_outcome, &m->unknown_outcome);
	acc(&t->conn_accepted, &m->conn_accepted);
	acc(&t->conn_open, &m->conn_open);
	acc(&t->conn_rejected, &m->conn_rejected);
	for (s = 0; s < METRICS_FRAMES_IN; s++)
		acc(&t->frames_in[s], &m->frames_in[s]);
	for (s = 0; s < METRICS_OUT_COUNT; s++)
		acc(&t->frames_out[s], &m->frames_out[s]);
	for (s = 0; s < SPOP_ST_COUNT; s++)
		acc(&t->malformed[s], &m->malformed[s]);
	acc(&t->notify_inflight, &m->notify_inflight);
	for (s = 0; s < METRICS_RELOAD_COUNT; s++)
		acc(&t->config_reloads[s], &m->config_reloads[s]);
	for (s = 0; s < METRICS_LIVE_COUNT; s++)
		acc(&t->live_decisions[s], &m->live_decisions[s]);
	acc(&t->unknown_plans, &m->unknown_plans);
	acc(&t->live_overrides, &m->live_overrides);
	acc(&t->denied_dropped, &m->denied_dropped);
	for (s = 0; s < CONFIG_MAX_POOLS; s++) {
		acc(&t->pool_used[s], &m->pool_used[s]);
		acc(&t->pool_accounts[s], &m->pool_accounts[s]);
	}
	for (s = 0; s < METRICS_LEASE_COUNT; s++)
		acc(&t->leases[s], &m->leases[s]);
	for (s = 0; s < METRICS_SETTLE_COUNT; s++)
		acc(&t->settles[s], &m->settles[s]);
}

static const char *const lease_names[METRICS_LEASE_COUNT] = {
	[METRICS_LEASE_TAKEN] = "taken", [METRICS_LEASE_RELEASED] = "released",
	[METRICS_LEASE_ENDED_EARLY] = "ended-early", [METRICS_LEASE_GONE] = "gone",
	[METRICS_LEASE_RELEASE_FAILED] = "release-failed",
};

static const char *const settle_names[METRICS_SETTLE_COUNT] = {
	[METRICS_SETTLE_CHARGED] = "charged", [METRICS_SETTLE_REFUNDED] = "refunded",
	[METRICS_SETTLE_EVEN] = "even", [METRICS_SETTLE_GONE] = "gone",
	[METRICS_SETTLE_FAILED] = "failed",
};

/* The value of counter or gauge <v> (a sum in the render's totals). */
static uint64_t val(const _Atomic uint64_t *v)
{
	return atomic_load_explicit(v, memory_order_relaxed);
}

/* One unlabelled sample <name> with the summed value <v>. */
static void scalar(struct render *r, const char *name, const char *type, const char *help,
                   uint64_t v)
{
	family(r, name, type, help);
	out(r, METRICS_PREFIX "%s %" PRIu64 "\n", name, v);
}

/* The samples of one histogram series <name>{<labels>} (<labels> is ""
 * or 'a="x",' with its trailing comma): cumulative buckets from <counts>
 * (<nb> bounds <bounds_s>, then +Inf), _sum from <sum_us>, _count. */
static void histogram(struct render *r, const char *name, const char *labels,
                      const char *const *bounds_s, unsigned nb,
                      const _Atomic uint64_t *counts, uint64_t sum_us)
{
	uint64_t cum = 0;
	size_t ll = strlen(labels);
	unsigned b;

	for (b = 0; b <= nb; b++) {
		cum += atomic_load_explicit(&counts[b], memory_order_relaxed);
		out(r, METRICS_PREFIX "%s_bucket{%sle=\"%s\"} %" PRIu64 "\n", name, labels,
		    b < nb ? bounds_s[b] : "+Inf", cum);
	}
	/* Integer arithmetic: exact at any magnitude, no float rounding. The
	 * labels lose their trailing comma here. */
	out(r, METRICS_PREFIX "%s_sum%s%.*s%s %" PRIu64 ".%06" PRIu64 "\n", name, ll ? "{" : "",
	    (int)(ll ? ll - 1 : 0), labels, ll ? "}" : "", sum_us / 1000000, sum_us % 1000000);
	/* _count is the +Inf bucket by definition; summing the buckets (rather
	 * than a separate counter) keeps the two equal within one scrape. */
	out(r, METRICS_PREFIX "%s_count%s%.*s%s %" PRIu64 "\n", name, ll ? "{" : "",
	    (int)(ll ? ll - 1 : 0), labels, ll ? "}" : "", cum);
}

/* The pool families of the summed <t>, pools and <np> policies of <c>:
 * one series per pool line (bounded like the policies). */
static void render_pools(struct render *r, const struct metrics *t, const struct config *c,
                         size_t np)
{
	size_t npools = c ? c->npools : 0, j, i;
	unsigned s;

	if (npools > CONFIG_MAX_POOLS)
		npools = CONFIG_MAX_POOLS;
	family(r, "pool_limit", "gauge", "A pool's limit: units per window (the configuration's).");
	for (j = 0; j < npools; j++)
		out(r, METRICS_PREFIX "pool_limit{pool=\"%s\"} %" PRIu64 "\n", c->pools[j].name,
		    c->pools[j].limit);
	family(r, "pool_used", "gauge",
	       "Units in a pool's window, as its next decision counts them: read from Redis "
	       "each second by every agent.");
	for (j = 0; j < npools; j++)
		out(r, METRICS_PREFIX "pool_used{pool=\"%s\"} %" PRIu64 "\n", c->pools[j].name,
		    val(&t->pool_used[j]));
	family(r, "pool_accounts_active", "gauge",
	       "Accounts holding units in a pool (its hash, trimmed by each decision): read "
	       "from Redis each second by every agent.");
	for (j = 0; j < npools; j++)
		out(r, METRICS_PREFIX "pool_accounts_active{pool=\"%s\"} %" PRIu64 "\n",
		    c->pools[j].name, val(&t->pool_accounts[j]));
	family(r, "pool_refusals_total", "counter",
	       "Requests this agent denied because of their pool, by pool and reason "
	       "(pool-full: no room; pool-share: above its share, only headroom left).");
	for (j = 0; j < npools; j++) {
		for (s = 0; s < METRICS_POOL_REFUSAL_COUNT; s++) {
			uint64_t sum = 0;

			for (i = 0; i < np; i++)
				if (c->policies[i].pooled &&
				    strcmp(c->policies[i].pool.name, c->pools[j].name) == 0)
					sum += val(&t->pool_refusals[i][s]);
			out(r, METRICS_PREFIX "pool_refusals_total{pool=\"%s\",reason=\"%s\"} %" PRIu64
			    "\n", c->pools[j].name, s == METRICS_POOL_SHARE ? "pool-share" : "pool-full", sum);
		}
	}
}

/* Render <n> blocks <ms> named by <c> into <dst>/<cap>; see metrics.h. */
int metrics_render(const struct metrics *const *ms, size_t n, const struct config *c,
                   const char *version, char *dst, size_t cap)
{
	struct render r = { .dst = dst, .cap = cap, .len = 0, .failed = 0 };
	struct metrics t;                  /* ~40 KB, sums of all threads */
	size_t np = c ? c->npolicies : 0, i;
	unsigned s, k;
	char ver[128];

	if (!dst || cap == 0)
		return -1;
	/* One pass over the threads, then render from the private total. */
	memset(&t, 0, sizeof(t));
	for (i = 0; i < n; i++)
		if (ms[i])
			metrics_sum_into(&t, ms[i]);
	if (np > CONFIG_MAX_POLICIES)
		np = CONFIG_MAX_POLICIES;

	family(&r, "decisions_total", "counter",
	       "Decisions answered to HAProxy, by policy and status; shadow-deny: a shadow "
	       "policy would have denied and answered allow (not counted under allow).");
	for (i = 0; i < np; i++) {
		for (s = 0; s < WINDOW_STATUS_COUNT; s++)
			out(&r, METRICS_PREFIX "decisions_total{policy=\"%s\",status=\"%s\"} %" PRIu64 "\n",
			    c->policies[i].name, window_status_str((enum window_status)s),
			    val(&t.decisions[i][s]));
		out(&r, METRICS_PREFIX "decisions_total{policy=\"%s\",status=\"shadow-deny\"} %" PRIu64 "\n",
		    c->policies[i].name, val(&t.shadow_denies[i]));
	}

	family(&r, "shadow_denies_total", "counter",
	       "Requests a shadow policy would have denied (answered allow).");
	for (i = 0; i < np; i++)
		out(&r, METRICS_PREFIX "shadow_denies_total{policy=\"%s\"} %" PRIu64 "\n",
		    c->policies[i].name, val(&t.shadow_denies[i]));

	family(&r, "local_cache_answers_total", "counter",
	       "Denies answered from the agent's local deny cache without asking Redis.");
	for (i = 0; i < np; i++)
		out(&r, METRICS_PREFIX "local_cache_answers_total{policy=\"%s\"} %" PRIu64 "\n",
		    c->policies[i].name, val(&t.cache_denies[i]));

	family(&r, "errors_total", "counter",
	       "Decisions that carried a reason (errors and fail-open allows), by reason.");
	for (s = 1; s < WINDOW_REASON_COUNT; s++)
		out(&r, METRICS_PREFIX "errors_total{reason=\"%s\"} %" PRIu64 "\n",
		    window_reason_str((enum window_reason)s), val(&t.errors_by_reason[s]));

	family(&r, "decision_duration_seconds", "histogram",
	       "Time from reading a NOTIFY to writing its ACK, by policy (the first message's) "
	       "and status (as decisions_total).");
	for (i = 0; i < np; i++) {
		for (s = 0; s < METRICS_DEC_STATUS_COUNT; s++) {
			char labels[WINDOW_NAME_MAX + 48];

			snprintf(labels, sizeof(labels), "policy=\"%s\",status=\"%s\",",
			         c->policies[i].name, dec_status_str(s));
			histogram(&r, "decision_duration_seconds", labels, dec_bounds_s,
			          METRICS_DEC_BUCKETS, t.decision_latency[i][s],
			          val(&t.decision_latency_sum_us[i][s]));
		}
	}

	family(&r, "redis_call_duration_seconds", "histogram",
	       "Time from sending a script call to Redis to its reply.");
	histogram(&r, "redis_call_duration_seconds", "", lat_bounds_s, METRICS_LAT_BUCKETS,
	          t.redis_latency, val(&t.redis_latency_sum_us));

	family(&r, "redis_errors_total", "counter", "Failed Redis calls, by kind.");
	for (s = 0; s < METRICS_REDIS_ERR_COUNT; s++)
		out(&r, METRICS_PREFIX "redis_errors_total{kind=\"%s\"} %" PRIu64 "\n",
		    redis_err_names[s], val(&t.redis_errors[s]));

	scalar(&r, "redis_reconnects_total", "counter", "Reconnections to Redis.",
	       val(&t.redis_reconnects));
	scalar(&r, "redis_connected", "gauge",
	       "Worker threads currently connected to Redis (equals the thread count when healthy).",
	       val(&t.redis_connected));
	scalar(&r, "redis_unsafe_eviction", "gauge",
	       "1 while a Redis the agent uses has a maxmemory-policy other than noeviction.",
	       val(&t.redis_unsafe_eviction) ? 1 : 0);
	family(&r, "redis_engine", "gauge",
	       "1 while a ready Redis link decides with this engine (redis-engine): the "
	       "module's RATELIMIT.DECIDE or the script.");
	for (s = 0; s < METRICS_ENGINE_COUNT; s++)
		out(&r, METRICS_PREFIX "redis_engine{engine=\"%s\"} %d\n",
		    s == METRICS_ENGINE_MODULE ? "module" : "script", val(&t.redis_engine[s]) ? 1 : 0);
	family(&r, "redis_replies_total", "counter",
	       "Replies Redis gave to decisions, by the engine that answered (the module's "
	       "RATELIMIT.DECIDE or the script) and by result: decision, or error.");
	for (s = 0; s < METRICS_ENGINE_COUNT; s++)
		for (k = 0; k < METRICS_REPLY_COUNT; k++)
			out(&r, METRICS_PREFIX "redis_replies_total{engine=\"%s\",result=\"%s\"} %" PRIu64 "\n",
			    s == METRICS_ENGINE_MODULE ? "module" : "script",
			    k == METRICS_REPLY_ERROR ? "error" : "decision", val(&t.redis_replies[s][k]));
	scalar(&r, "late_admissions_total", "counter",
	       "Requests Redis admitted (and recorded) after the agent had answered "
	       "redis-timeout: size redis-timeout with it.", val(&t.late_admissions));
	scalar(&r, "decisions_unknown_outcome_total", "counter",
	       "Decisions sent to Redis on a connection lost before their reply: Redis may or "
	       "may not have recorded them.", val(&t.unknown_outcome));
	scalar(&r, "connections_accepted_total", "counter", "Connections accepted from HAProxy.",
	       val(&t.conn_accepted));
	scalar(&r, "connections_open", "gauge", "Connections from HAProxy open now.",
	       val(&t.conn_open));
	scalar(&r, "connections_rejected_total", "counter",
	       "Connections refused because max-connections was reached.", val(&t.conn_rejected));

	family(&r, "frames_received_total", "counter", "SPOP frames received, by type.");
	for (s = 0; s < METRICS_FRAMES_IN; s++)
		out(&r, METRICS_PREFIX "frames_received_total{type=\"%s\"} %" PRIu64 "\n",
		    frame_in_names[s], val(&t.frames_in[s]));
	family(&r, "frames_sent_total", "counter", "SPOP frames sent, by type.");
	for (s = 0; s < METRICS_OUT_COUNT; s++)
		out(&r, METRICS_PREFIX "frames_sent_total{type=\"%s\"} %" PRIu64 "\n",
		    frame_out_names[s], val(&t.frames_out[s]));

	family(&r, "malformed_frames_total", "counter",
	       "Connections closed for a protocol error, by SPOP status sent.");
	for (s = 0; s < SPOP_ST_COUNT; s++)
		out(&r, METRICS_PREFIX "malformed_frames_total{status=\"%s\"} %" PRIu64 "\n",
		    spop_status_names[s], val(&t.malformed[s]));

	scalar(&r, "notify_inflight", "gauge", "NOTIFY frames waiting for a decision.",
	       val(&t.notify_inflight));

	family(&r, "config_reloads_total", "counter",
	       "SIGHUP reloads, by result (failure: the file was rejected, the old one serves).");
	for (s = 0; s < METRICS_RELOAD_COUNT; s++)
		out(&r, METRICS_PREFIX "config_reloads_total{result=\"%s\"} %" PRIu64 "\n",
		    reload_names[s], val(&t.config_reloads[s]));

	scalar(&r, "live_overrides", "gauge",
	       "Live overrides (ratelimit-spoa ctl override) in effect now, as this agent sees them.",
	       val(&t.live_overrides));
	family(&r, "live_override_decisions_total", "counter",
	       "Decisions a live override made: with its limits, or denied by a block (no Redis).");
	for (s = 0; s < METRICS_LIVE_COUNT; s++)
		out(&r, METRICS_PREFIX "live_override_decisions_total{kind=\"%s\"} %" PRIu64 "\n",
		    s == METRICS_LIVE_BLOCK ? "block" : "limits", val(&t.live_decisions[s]));
	scalar(&r, "unknown_plan_total", "counter",
	       "Decisions whose plan arg names no plan of the config (decided on the policy's own "
	       "limits).", val(&t.unknown_plans));
	scalar(&r, "denied_dropped_total", "counter",
	       "Denials left out of ctl top-denied (the per-second table full, or its write failed).",
	       val(&t.denied_dropped));
	family(&r, "leases_total", "counter",
	       "In-flight leases (inflight=): taken, released, ended-early (released after its end), "
	       "gone (Redis had none), release-failed (Redis not reached before its end).");
	for (s = 0; s < METRICS_LEASE_COUNT; s++)
		out(&r, METRICS_PREFIX "leases_total{event=\"%s\"} %" PRIu64 "\n", lease_names[s],
		    val(&t.leases[s]));
	family(&r, "settles_total", "counter",
	       "Settles (settle=, ratelimit-done): charged (real above reserved), refunded (below), "
	       "even, gone (Redis had no reservation), failed (not reached in time, or refused).");
	for (s = 0; s < METRICS_SETTLE_COUNT; s++)
		out(&r, METRICS_PREFIX "settles_total{event=\"%s\"} %" PRIu64 "\n", settle_names[s],
		    val(&t.settles[s]));

	render_pools(&r, &t, c, np);

	escape_label(ver, sizeof(ver), version ? version : "");
	family(&r, "build_info", "gauge", "Build information; the value is always 1.");
	out(&r, METRICS_PREFIX "build_info{version=\"%s\"} 1\n", ver);

	if (r.failed)
		return -1;
	return (int)r.len;
}

/* One unprefixed, unlabelled family with its single sample <value>. */
static void plain_family(struct render *r, const char *name, const char *type,
                         const char *help, const char *value)
{
	out(r, "# HELP %s %s\n# TYPE %s %s\n%s %s\n", name, help, name, type, name, value);
}

/* Render <p> as process_* families; see metrics.h. */
int metrics_render_process(const struct metrics_process *p, char *dst, size_t cap)
{
	struct render r = { .dst = dst, .cap = cap, .len = 0, .failed = 0 };
	char v[48];

	if (!dst || cap == 0)
		return -1;
	snprintf(v, sizeof(v), "%" PRIu64 ".%06" PRIu64, p->cpu_us / 1000000, p->cpu_us % 1000000);
	plain_family(&r, "process_cpu_seconds_total", "counter",
	             "Total user and system CPU time spent in seconds.", v);
	snprintf(v, sizeof(v), "%" PRIu64, p->resident_bytes);
	plain_family(&r, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", v);
	snprintf(v, sizeof(v), "%" PRIu64, p->virtual_bytes);
	plain_family(&r, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", v);
	snprintf(v, sizeof(v), "%" PRIu64, p->open_fds);
	plain_family(&r, "process_open_fds", "gauge", "Number of open file descriptors.", v);
	snprintf(v, sizeof(v), "%" PRIu64, p->max_fds);
	plain_family(&r, "process_max_fds", "gauge", "Maximum number of open file descriptors.", v);
	snprintf(v, sizeof(v), "%" PRIu64 ".%02" PRIu64, p->start_time_us / 1000000,
	         p->start_time_us % 1000000 / 10000);
	plain_family(&r, "process_start_time_seconds", "gauge",
	             "Start time of the process since unix epoch in seconds.", v);
	if (r.failed)
		return -1;
	return (int)r.len;
}
