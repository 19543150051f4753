/*
 * spoa-bench: the command line. --help, the options with their defaults and
 * ranges, the target address resolved once before the run.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "bench.h"
#include "spop.h"

/* The --help text, on <out>. */
static void bench_usage(FILE *out)
{
	fprintf(out,
"usage: spoa-bench [options]\n"
"\n"
"An SPOP load generator that plays HAProxy against a rate-limit agent: it opens\n"
"connections, does the HELLO handshake (version 2.0, pipelining), then keeps NOTIFY\n"
"frames in flight, each with the message \"ratelimit\" and the args policy (STR),\n"
"key (STR), cost (INT64), exactly as HAProxy sends them. It prints throughput,\n"
"latency percentiles and the allow/deny/error counts from the ACKs' status var.\n"
"\n"
"Target and load:\n"
"  -a, --address ADDR     agent address: host:port, [v6]:port or unix:/path\n"
"                         (default 127.0.0.1:12345)\n"
"  -c, --connections N    load connections (default 8); 0 with --idle only\n"
"  -d, --depth N          NOTIFYs in flight per connection (default 16);\n"
"                         1 = one at a time, >1 needs the agent's pipelining\n"
"  -T, --threads N        client threads, connections split over them (default 1)\n"
"  -t, --duration TIME    run for TIME: 10, 10s, 500ms, 1m (default 5s)\n"
"  -n, --requests N       send exactly N NOTIFYs instead of running for a duration\n"
"      --idle N           also open N idle connections (HELLO, then silent) and hold\n"
"                         them for the run, e.g. to measure the agent's memory\n"
"\n"
"Message:\n"
"  -p, --policy NAME      policy arg (default \"transfer\")\n"
"  -k, --keys N           accounts, keys uniform over <prefix>0..<prefix>N-1 (default 10000)\n"
"      --hot N            a hot set: the first N accounts ...\n"
"      --hot-pct P        ... receive P%% of the requests (0..100, default 0)\n"
"      --key-prefix S     key prefix (default \"ACC-\")\n"
"      --cost N           cost arg, INT64 (default 1)\n"
"      --done             the response phase too: for each ACK that allows with a\n"
"                         \"lease\" variable (a policy with inflight= or settle=),\n"
"                         a NOTIFY of its own with the message \"ratelimit-done\"\n"
"                         and the args policy, key, lease (STR), as HAProxy sends\n"
"                         it at the response; the request holds its slot of\n"
"                         --depth until that is acknowledged too\n"
"      --done-cost N      with --done (implied), also the arg cost (INT64): the\n"
"                         real cost a settle= policy settles to\n"
"\n"
"Protocol:\n"
"      --max-frame-size N max-frame-size offered in HELLO (default 16380, as HAProxy)\n"
"      --split            one write per NOTIFY, as HAProxy 3.x sends them (default:\n"
"                         the NOTIFYs of freed slots in one write, as 2.6 batches)\n"
"      --drain-timeout T  after the run, wait at most T for the last ACKs (default 5s)\n"
"      --seed N           PRNG seed for the keys (default: time-based)\n"
"\n"
"Output:\n"
"      --csv              print one CSV line (columns: see --csv-header)\n"
"      --csv-header       print the CSV header line and exit\n"
"      --json             print one JSON object on one line\n"
"  -q, --quiet            no text report (implied by --csv/--json)\n"
"      --strict           exit 3 if any ACK says \"error\" or carries no status\n"
"  -h, --help             this text\n"
"  -V, --version          print the version\n"
"\n"
"Latency is measured from the write of a NOTIFY to the read of its ACK, in a\n"
"log-linear histogram (<1.6%% error); percentiles are bucket upper bounds.\n"
"ACKs are matched by stream-id and frame-id and may arrive in any order.\n"
"With --done, sent/acked, throughput and latency are the ratelimit messages';\n"
"the ratelimit-done ones are counted apart, in the text and JSON reports.\n"
"\n"
"Exit status: 0 done; 1 protocol or connection error, or ACKs missing after the\n"
"drain; 2 usage; 3 --strict and some ACK said \"error\" or had no status.\n"
"\n"
"Example: spoa-bench -a 127.0.0.1:12345 -c 16 -d 16 -T 2 -t 10s -k 10000 \\\n"
"            --hot 5 --hot-pct 20 -p transfer\n");
}

static const char bench_csv_header[] =
	"target,threads,connections,depth,keys,hot,hot_pct,policy,duration_s,"
	"sent,acked,msgs_per_s,p50_us,p99_us,p999_us,max_us,mean_us,"
	"allow,deny,error,no_status,protocol_errors,connection_errors,lost";

/* Parse an unsigned integer in [<lo>, <hi>] from <s>. Returns 0 or -1. */
static int bench_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (*s == '\0' || *s == '-')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0 || *end != '\0' || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

/* Parse a duration "<n>[ms|s|m]" (bare number = seconds) into <*secs>. */
static int bench_parse_seconds(const char *s, double *secs)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno != 0 || end == s || v < 0)
		return -1;
	if (*end == '\0' || strcmp(end, "s") == 0)
		*secs = v;
	else if (strcmp(end, "ms") == 0)
		*secs = v / 1000.0;
	else if (strcmp(end, "m") == 0)
		*secs = v * 60.0;
	else
		return -1;
	return 0;
}

/* Resolve <o->address> into <o->sa>. Returns 0 or -1 with <err>. */
static int bench_resolve(struct bench_opts *o, char *err, size_t errlen)
{
	struct addrinfo hints, *res = NULL;
	char host[256], *colon;
	const char *port;
	int rc;

	memset(&o->sa, 0, sizeof(o->sa));
	if (strncmp(o->address, "unix:", 5) == 0) {
		struct sockaddr_un *un = (struct sockaddr_un *)&o->sa;
		const char *path = o->address + 5;

		if (strlen(path) == 0 || strlen(path) >= sizeof(un->sun_path)) {
			snprintf(err, errlen, "bad unix socket path: %.200s", path);
			return -1;
		}
		un->sun_family = AF_UNIX;
		memcpy(un->sun_path, path, strlen(path) + 1);
		o->salen = (socklen_t)sizeof(*un);
		return 0;
	}
	if (snprintf(host, sizeof(host), "%s", o->address) >= (int)sizeof(host)) {
		snprintf(err, errlen, "address too long");
		return -1;
	}
	colon = strrchr(host, ':');
	if (colon == NULL || colon[1] == '\0') {
		snprintf(err, errlen, "address needs host:port or unix:/path: %.200s", o->address);
		return -1;
	}
	*colon = '\0';
	port = colon + 1;
	if (host[0] == '[') {
		size_t hl = strlen(host);

		if (hl < 2 || host[hl - 1] != ']') {
			snprintf(err, errlen, "bad IPv6 address: %.200s", o->address);
			return -1;
		}
		host[hl - 1] = '\0';
		memmove(host, host + 1, hl - 1);
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	rc = getaddrinfo(host, port, &hints, &res);
	if (rc != 0) {
		snprintf(err, errlen, "%.200s: %s", o->address, gai_strerror(rc));
		return -1;
	}
	memcpy(&o->sa, res->ai_addr, res->ai_addrlen);
	o->salen = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

enum bench_longopt {
	BENCH_OPT_IDLE = 256,
	BENCH_OPT_HOT,
	BENCH_OPT_HOT_PCT,
	BENCH_OPT_KEY_PREFIX,
	BENCH_OPT_COST,
	BENCH_OPT_MAX_FRAME,
	BENCH_OPT_SPLIT,
	BENCH_OPT_DRAIN,
	BENCH_OPT_SEED,
	BENCH_OPT_CSV,
	BENCH_OPT_CSV_HEADER,
	BENCH_OPT_JSON,
	BENCH_OPT_STRICT,
	BENCH_OPT_DONE,
	BENCH_OPT_DONE_COST,
	BENCH_OPT_COUNT
};

/* Fill <o> from <argc>/<argv>. Returns 0, 1 when the program should exit 0
 * (help, version), or -1 with <err>. */
int bench_parse_args(int argc, char **argv, struct bench_opts *o,
                     char *err, size_t errlen)
{
	static const struct option longopts[] = {
		{ "address", required_argument, NULL, 'a' },
		{ "connections", required_argument, NULL, 'c' },
		{ "depth", required_argument, NULL, 'd' },
		{ "keys", required_argument, NULL, 'k' },
		{ "policy", required_argument, NULL, 'p' },
		{ "duration", required_argument, NULL, 't' },
		{ "requests", required_argument, NULL, 'n' },
		{ "threads", required_argument, NULL, 'T' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ "idle", required_argument, NULL, BENCH_OPT_IDLE },
		{ "hot", required_argument, NULL, BENCH_OPT_HOT },
		{ "hot-pct", required_argument, NULL, BENCH_OPT_HOT_PCT },
		{ "key-prefix", required_argument, NULL, BENCH_OPT_KEY_PREFIX },
		{ "cost", required_argument, NULL, BENCH_OPT_COST },
		{ "max-frame-size", required_argument, NULL, BENCH_OPT_MAX_FRAME },
		{ "split", no_argument, NULL, BENCH_OPT_SPLIT },
		{ "drain-timeout", required_argument, NULL, BENCH_OPT_DRAIN },
		{ "seed", required_argument, NULL, BENCH_OPT_SEED },
		{ "csv", no_argument, NULL, BENCH_OPT_CSV },
		{ "csv-header", no_argument, NULL, BENCH_OPT_CSV_HEADER },
		{ "json", no_argument, NULL, BENCH_OPT_JSON },
		{ "strict", no_argument, NULL, BENCH_OPT_STRICT },
		{ "done", no_argument, NULL, BENCH_OPT_DONE },
		{ "done-cost", required_argument, NULL, BENCH_OPT_DONE_COST },
		{ NULL, 0, NULL, 0 }
	};
	uint64_t v;
	int ch;
	bool seeded = false;

	memset(o, 0, sizeof(*o));
	snprintf(o->address, sizeof(o->address), "127.0.0.1:12345");
	snprintf(o->policy, sizeof(o->policy), "transfer");
	snprintf(o->key_prefix, sizeof(o->key_prefix), "ACC-");
	o->conns = 8;
	o->depth = 16;
	o->keys = 10000;
	o->cost = 1;
	o->done_cost = -1;
	o->duration_s = 5.0;
	o->threads = 1;
	o->max_frame_size = BENCH_DEFAULT_FRAME;
	o->drain_s = 5.0;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, ":a:c:d:k:p:t:n:T:qhV", longopts, NULL)) != -1) {
		const char *arg = optarg;

		switch (ch) {
		case 'a':
			if (snprintf(o->address, sizeof(o->address), "%s", arg) >= (int)sizeof(o->address))
				goto bad;
			break;
		case 'c':
			if (bench_parse_u64(arg, 0, 100000, &v) == -1)
				goto bad;
			o->conns = (unsigned)v;
			break;
		case 'd':
			if (bench_parse_u64(arg, 1, 4096, &v) == -1)
				goto bad;
			o->depth = (unsigned)v;
			break;
		case 'k':
			if (bench_parse_u64(arg, 1, UINT64_MAX, &o->keys) == -1)
				goto bad;
			break;
		case 'p':
			if (arg[0] == '\0' ||
			    snprintf(o->policy, sizeof(o->policy), "%s", arg) >= (int)sizeof(o->policy))
				goto bad;
			break;
		case 't':
			if (bench_parse_seconds(arg, &o->duration_s) == -1 || o->duration_s <= 0)
				goto bad;
			break;
		case 'n':
			if (bench_parse_u64(arg, 1, UINT64_MAX, &o->requests) == -1)
				goto bad;
			break;
		case 'T':
			if (bench_parse_u64(arg, 1, 256, &v) == -1)
				goto bad;
			o->threads = (unsigned)v;
			break;
		case 'q':
			o->quiet = true;
			break;
		case 'h':
			bench_usage(stdout);
			return 1;
		case 'V':
			printf("spoa-bench %s\n", SPOA_VERSION);
			return 1;
		case BENCH_OPT_IDLE:
			if (bench_parse_u64(arg, 0, 1000000, &v) == -1)
				goto bad;
			o->idle = (unsigned)v;
			break;
		case BENCH_OPT_HOT:
			if (bench_parse_u64(arg, 0, UINT64_MAX, &o->hot) == -1)
				goto bad;
			break;
		case BENCH_OPT_HOT_PCT: {
			char *end;

			errno = 0;
			o->hot_pct = strtod(arg, &end);
			if (errno != 0 || end == arg || *end != '\0' || o->hot_pct < 0 || o->hot_pct > 100)
				goto bad;
			break;
		}
		case BENCH_OPT_KEY_PREFIX:
			/* room for 20 digits under the 256-byte key limit */
			if (strlen(arg) > BENCH_KEY_MAX - 20 ||
			    snprintf(o->key_prefix, sizeof(o->key_prefix), "%s", arg) >= (int)sizeof(o->key_prefix))
				goto bad;
			break;
		case BENCH_OPT_COST:
			if (bench_parse_u64(arg, 0, INT64_MAX, &v) == -1)
				goto bad;
			o->cost = (int64_t)v;
			break;
		case BENCH_OPT_MAX_FRAME:
			if (bench_parse_u64(arg, SPOP_MIN_FRAME_SIZE, SPOP_MAX_FRAME_SIZE, &v) == -1)
				goto bad;
			o->max_frame_size = (uint32_t)v;
			break;
		case BENCH_OPT_SPLIT:
			o->split = true;
			break;
		case BENCH_OPT_DRAIN:
			if (bench_parse_seconds(arg, &o->drain_s) == -1)
				goto bad;
			break;
		case BENCH_OPT_SEED:
			if (bench_parse_u64(arg, 0, UINT64_MAX, &o->seed) == -1)
				goto bad;
			seeded = true;
			break;
		case BENCH_OPT_CSV:
			o->output = BENCH_OUT_CSV;
			break;
		case BENCH_OPT_CSV_HEADER:
			printf("%s\n", bench_csv_header);
			return 1;
		case BENCH_OPT_JSON:
			o->output = BENCH_OUT_JSON;
			break;
		case BENCH_OPT_STRICT:
			o->strict = true;
			break;
		case BENCH_OPT_DONE:
			o->done = true;
			break;
		case BENCH_OPT_DONE_COST:
			if (bench_parse_u64(arg, 0, INT64_MAX, &v) == -1)
				goto bad;
			o->done_cost = (int64_t)v;
			o->done = true;
			break;
		case ':':
			snprintf(err, errlen, "option %s needs a value", argv[optind - 1]);
			return -1;
		default:
			snprintf(err, errlen, "unknown option %s", argv[optind - 1]);
			return -1;
		}
		continue;
bad:
		/* "--opt value" leaves optarg as its own argv word; "--opt=value"
		 * and "-cVALUE" point inside one */
		snprintf(err, errlen, "bad value '%s' for %s", arg,
		         optind >= 2 && argv[optind - 1] == optarg ? argv[optind - 2] : argv[optind - 1]);
		return -1;
	}
	if (optind < argc) {
		snprintf(err, errlen, "unexpected argument '%s'", argv[optind]);
		return -1;
	}
	if (o->conns == 0 && o->idle == 0) {
		snprintf(err, errlen, "nothing to do: -c 0 and no --idle");
		return -1;
	}
	if (o->conns == 0 && o->requests > 0) {
		snprintf(err, errlen, "-n needs load connections (-c)");
		return -1;
	}
	if (o->hot > o->keys) {
		snprintf(err, errlen, "--hot %" PRIu64 " is more than --keys %" PRIu64, o->hot, o->keys);
		return -1;
	}
	if (o->hot_pct > 0 && o->hot == 0) {
		snprintf(err, errlen, "--hot-pct needs --hot N");
		return -1;
	}
	if (o->threads > o->conns + o->idle)
		o->threads = o->conns + o->idle;
	if (!seeded)
		o->seed = bench_now_ns() ^ ((uint64_t)getpid() << 32);
	if (bench_resolve(o, err, errlen) == -1)
		return -1;
	return 0;
}
