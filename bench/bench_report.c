/*
 * spoa-bench: the figures. The latency histogram each thread fills, the
 * threads' counters added up, and the report as text, CSV or JSON.
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"

static const char *const bench_status_names[BENCH_STATUS_COUNT] = {
	[BENCH_STATUS_ALLOW] = "allow",
	[BENCH_STATUS_DENY] = "deny",
	[BENCH_STATUS_ERROR] = "error",
	[BENCH_STATUS_NONE] = "none",
};

/* Bucket index of <v> nanoseconds. */
static unsigned bench_hist_index(uint64_t v)
{
	unsigned msb;

	if (v < BENCH_HIST_SUB)
		return (unsigned)v;
	msb = 63u - (unsigned)__builtin_clzll(v);
	return ((msb - BENCH_HIST_SUB_BITS + 1u) << BENCH_HIST_SUB_BITS) +
	       (unsigned)((v >> (msb - BENCH_HIST_SUB_BITS)) - BENCH_HIST_SUB);
}

/* Highest value that falls in bucket <i>. */
static uint64_t bench_hist_upper(unsigned i)
{
	unsigned b = i >> BENCH_HIST_SUB_BITS;
	uint64_t sub = i & (BENCH_HIST_SUB - 1u);

	if (b == 0)
		return i;
	return ((BENCH_HIST_SUB + sub + 1u) << (b - 1u)) - 1u;
}

/* Count one latency of <ns> nanoseconds in <h>. */
void bench_hist_record(struct bench_hist *h, uint64_t ns)
{
	h->counts[bench_hist_index(ns)]++;
	h->n++;
	h->sum_ns += ns;
	if (ns > h->max_ns)
		h->max_ns = ns;
}

/* Add <src> into <dst>. */
static void bench_hist_merge(struct bench_hist *dst, const struct bench_hist *src)
{
	unsigned i;

	for (i = 0; i < BENCH_HIST_SIZE; i++)
		dst->counts[i] += src->counts[i];
	dst->n += src->n;
	dst->sum_ns += src->sum_ns;
	if (src->max_ns > dst->max_ns)
		dst->max_ns = src->max_ns;
}

/* Value at quantile <q> (0..1] of <h>: the upper bound of the bucket that
 * holds it, never above the exact maximum. 0 when <h> is empty. */
static uint64_t bench_hist_quantile(const struct bench_hist *h, double q)
{
	uint64_t rank, seen = 0;
	unsigned i;

	if (h->n == 0)
		return 0;
	rank = (uint64_t)(q * (double)h->n + 0.5);
	if (rank < 1)
		rank = 1;
	if (rank > h->n)
		rank = h->n;
	for (i = 0; i < BENCH_HIST_SIZE; i++) {
		seen += h->counts[i];
		if (seen >= rank) {
			uint64_t v = bench_hist_upper(i);

			return v < h->max_ns ? v : h->max_ns;
		}
	}
	return h->max_ns;
}

/* Sum <n> threads <ts> into <tot>. */
void bench_total_sum(struct bench_total *tot, const struct bench_thread *ts, unsigned n)
{
	uint64_t start = UINT64_MAX, end = 0;
	unsigned i, j, k;

	memset(tot, 0, sizeof(*tot));
	for (i = 0; i < n; i++) {
		const struct bench_thread *t = &ts[i];

		tot->sent += t->sent;
		tot->acked += t->acked;
		tot->done_sent += t->done_sent;
		tot->done_acked += t->done_acked;
		for (j = 0; j < BENCH_STATUS_COUNT; j++)
			tot->status[j] += t->status[j];
		tot->proto_errors += t->proto_errors;
		tot->conn_errors += t->conn_errors;
		tot->idle_closed += t->idle_closed;
		tot->lost += t->lost;
		tot->reasons_other += t->reasons_other;
		for (j = 0; j < BENCH_REASONS && t->reasons[j].n > 0; j++) {
			for (k = 0; k < BENCH_REASONS; k++) {
				if (tot->reasons[k].n == 0) {
					tot->reasons[k] = t->reasons[j];
					break;
				}
				if (strcmp(tot->reasons[k].name, t->reasons[j].name) == 0) {
					tot->reasons[k].n += t->reasons[j].n;
					break;
				}
			}
			if (k == BENCH_REASONS)
				tot->reasons_other += t->reasons[j].n;
		}
		bench_hist_merge(&tot->hist, &t->hist);
		if (t->start_ns != 0 && t->start_ns < start)
			start = t->start_ns;
		if (t->end_ns > end)
			end = t->end_ns;
		if (tot->err == NULL && t->err[0] != '\0')
			tot->err = t->err;
	}
	tot->elapsed_s = end > start ? (double)(end - start) / 1e9 : 0.0;
}

/* Print <s> as a JSON string body (the values we print are plain ASCII
 * names, but a policy or address could hold a quote). */
static void bench_json_str(const char *s)
{
	for (; *s != '\0'; s++) {
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			printf("\\u%04x", (unsigned)(unsigned char)*s);
		else
			putchar(*s);
	}
}

/* Print <tot> for options <o> in the chosen output format. */
void bench_report(const struct bench_opts *o, const struct bench_total *tot)
{
	double rate = tot->elapsed_s > 0 ? (double)tot->acked / tot->elapsed_s : 0.0;
	double p50 = (double)bench_hist_quantile(&tot->hist, 0.50) / 1e3;
	double p99 = (double)bench_hist_quantile(&tot->hist, 0.99) / 1e3;
	double p999 = (double)bench_hist_quantile(&tot->hist, 0.999) / 1e3;
	double max = (double)tot->hist.max_ns / 1e3;
	double mean = tot->hist.n ? (double)tot->hist.sum_ns / (double)tot->hist.n / 1e3 : 0.0;
	unsigned i;

	if (o->output == BENCH_OUT_CSV) {
		printf("%s,%u,%u,%u,%" PRIu64 ",%" PRIu64 ",%g,%s,%.3f,%" PRIu64 ",%" PRIu64
		       ",%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%" PRIu64 ",%" PRIu64 ",%" PRIu64
		       ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 "\n",
		       o->address, o->threads, o->conns, o->depth, o->keys, o->hot, o->hot_pct,
		       o->policy, tot->elapsed_s, tot->sent, tot->acked, rate, p50, p99, p999,
		       max, mean, tot->status[BENCH_STATUS_ALLOW], tot->status[BENCH_STATUS_DENY],
		       tot->status[BENCH_STATUS_ERROR], tot->status[BENCH_STATUS_NONE],
		       tot->proto_errors, tot->conn_errors, tot->lost);
		return;
	}
	if (o->output == BENCH_OUT_JSON) {
		printf("{\"target\":\"");
		bench_json_str(o->address);
		printf("\",\"threads\":%u,\"connections\":%u,\"depth\":%u,\"idle\":%u,"
		       "\"keys\":%" PRIu64 ",\"hot\":%" PRIu64 ",\"hot_pct\":%g,\"policy\":\"",
		       o->threads, o->conns, o->depth, o->idle, o->keys, o->hot, o->hot_pct);
		bench_json_str(o->policy);
		printf("\",\"duration_s\":%.3f,\"sent\":%" PRIu64 ",\"acked\":%" PRIu64
		       ",\"msgs_per_s\":%.1f,\"latency_us\":{\"p50\":%.1f,\"p99\":%.1f,"
		       "\"p999\":%.1f,\"max\":%.1f,\"mean\":%.1f},\"allow\":%" PRIu64
		       ",\"deny\":%" PRIu64 ",\"error\":%" PRIu64 ",\"no_status\":%" PRIu64
		       ",\"protocol_errors\":%" PRIu64 ",\"connection_errors\":%" PRIu64
		       ",\"idle_closed\":%" PRIu64 ",\"lost\":%" PRIu64 ",\"error_reasons\":{",
		       tot->elapsed_s, tot->sent, tot->acked, rate, p50, p99, p999, max, mean,
		       tot->status[BENCH_STATUS_ALLOW], tot->status[BENCH_STATUS_DENY],
		       tot->status[BENCH_STATUS_ERROR], tot->status[BENCH_STATUS_NONE],
		       tot->proto_errors, tot->conn_errors, tot->idle_closed, tot->lost);
		for (i = 0; i < BENCH_REASONS && tot->reasons[i].n > 0; i++) {
			printf("%s\"", i ? "," : "");
			bench_json_str(tot->reasons[i].name);
			printf("\":%" PRIu64, tot->reasons[i].n);
		}
		printf("}");
		if (o->done)
			printf(",\"done_sent\":%" PRIu64 ",\"done_acked\":%" PRIu64,
			       tot->done_sent, tot->done_acked);
		printf("}\n");
		return;
	}
	if (o->quiet)
		return;
	printf("spoa-bench %s -> %s: %u thread(s), %u connection(s) x depth %u",
	       SPOA_VERSION, o->address, o->threads, o->conns, o->depth);
	if (o->idle > 0)
		printf(", %u idle", o->idle);
	printf("\n  keys       %" PRIu64 " accounts", o->keys);
	if (o->hot > 0)
		printf(", hot %" PRIu64 " get %g%%", o->hot, o->hot_pct);
	printf(", policy \"%s\", cost %" PRId64 "\n", o->policy, o->cost);
	printf("  requests   %" PRIu64 " sent, %" PRIu64 " acked in %.3f s\n",
	       tot->sent, tot->acked, tot->elapsed_s);
	if (o->done)
		printf("  done       %" PRIu64 " ratelimit-done sent, %" PRIu64 " acked\n",
		       tot->done_sent, tot->done_acked);
	printf("  throughput %.1f msgs/s\n", rate);
	printf("  latency    p50 %.1f us  p99 %.1f us  p99.9 %.1f us  max %.1f us  (mean %.1f us)\n",
	       p50, p99, p999, max, mean);
	printf("  status    ");
	for (i = 0; i < BENCH_STATUS_COUNT; i++)
		printf(" %s %" PRIu64, bench_status_names[i], tot->status[i]);
	printf("\n");
	if (tot->status[BENCH_STATUS_ERROR] > 0) {
		printf("  reasons   ");
		for (i = 0; i < BENCH_REASONS && tot->reasons[i].n > 0; i++)
			printf(" %s %" PRIu64, tot->reasons[i].name, tot->reasons[i].n);
		if (tot->reasons_other > 0)
			printf(" (others) %" PRIu64, tot->reasons_other);
		printf("\n");
	}
	printf("  errors     protocol %" PRIu64 ", connection %" PRIu64 ", lost %" PRIu64,
	       tot->proto_errors, tot->conn_errors, tot->lost);
	if (tot->idle_closed > 0)
		printf(", idle closed by agent %" PRIu64, tot->idle_closed);
	printf("\n");
}
