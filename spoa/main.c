/*
 * main - command line, listener, signals and wiring. The only file with
 * process-wide state; nothing here is worth a unit test on its own.
 */
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <ev.h>
#include "hiredis_compat.h"

#include "config.h"
#include "conn.h"
#include "ctl.h"
#include "denied.h"
#include "http.h"
#include "live.h"
#include "live_control.h"
#include "log.h"
#include "metrics.h"
#include "net.h"
#include "proc.h"
#include "spop.h"
#include "worker.h"

#ifndef SPOA_VERSION
#define SPOA_VERSION "0.0.0"
#endif

/* A worker whose loop has not turned for this long no longer serves SPOP. */
#define MAIN_WORKER_SILENCE_US (10u * 1000000u)

/* The Lua script, embedded at build time from lua/sliding_window.lua. */
extern const char spoa_script[];
extern const size_t spoa_script_len;

struct main_state {
	struct ev_loop *loop;
	struct config cfg;              /* current, as parsed */
	const char *cfg_path;           /* -f, for SIGHUP */
	const char *opt_listen;         /* flags that override the file */
	const char *opt_redis;
	int listen_fd;
	struct net_unix unix_sock;      /* a unix: listener, to remove at the end */
	ev_io accept_w;
	ev_timer accept_pause;          /* EMFILE back-off */
	ev_signal sig_term, sig_int, sig_hup;
	/* A reload in two phases (worker.h): the workers prepare <staged>,
	 * post their verdicts (reload_done), then main commits or aborts. */
	ev_async reload_done;
	enum reload_state reload;       /* all workers' at once (reload.h) */
	bool reload_again;              /* a SIGHUP came during a reload */
	unsigned reload_seq;
	struct config staged;           /* the parsed file, while reloading */
	struct cfg_gen *staged_gen;
	struct worker *workers[CONFIG_THREADS_MAX];
	unsigned nworkers;
	unsigned next_worker;
	/* connections open in the whole process: taken by the acceptor,
	 * given back by the worker that closes them */
	_Atomic unsigned admitted;
	struct http_server *http;
	struct live *live;              /* live overrides, the table the workers read (ctl) */
	struct live_control *control;   /* ... and the thread that polls Redis for it */
	struct denied *denied;          /* denial counts for ctl top-denied */
	/* Counters written by the main thread only (refused connections,
	 * reloads): the scraper sums it with the workers' blocks. */
	struct metrics metrics;
	bool debug;                     /* -d: debug survives a reload */
	bool stopping;
};

static const char main_usage[] =
"Usage: ratelimit-spoa [-f FILE] [options]\n"
"       ratelimit-spoa ctl [-c FILE] show|reset|override|overrides|top-denied ...\n"
"                      (live control of accounts: ratelimit-spoa ctl --help)\n"
"\n"
"A global rate limiter for HAProxy: an SPOP agent that decides with a\n"
"sliding-window log in Redis. HAProxy sends message 'ratelimit' (args policy,\n"
"key, cost, plan); the agent answers txn vars status/limit/remaining/reset/\n"
"retry_after/reason, and window/policy_hdr/ratelimit_hdr (the deciding\n"
"window, the RateLimit-Policy and RateLimit header values; a pooled policy\n"
"also pool/pool_limit, and pool_remaining/pool_reset when the pool refused).\n"
"\n"
"Options:\n"
"  -f, --config FILE   read the configuration file (see ratelimit-spoa(8))\n"
"  -c, --check         check the configuration, print 'file:line: reason' on\n"
"                      error, exit 0 (valid) or 1 (invalid); warnings print\n"
"                      as 'file:line: warning: reason'\n"
"      --routes MAP    with -c: also check HAProxy's routes map (routes.map):\n"
"                      every policy it names exists here, a fail=open route's\n"
"                      policy is on-redis-error=allow, no line is hidden by\n"
"                      an earlier prefix ('file:line: reason'); warns when a\n"
"                      line would decide methods no line names on a path\n"
"                      another method's line limits more strictly\n"
"      --plans MAP     with -c: warn ('map:line: warning: ...') of each\n"
"                      plan=<plan> of an API key or client certificate map\n"
"                      that is no plan of this config (repeatable)\n"
"      --listen ADDR   override 'listen' (host:port, [v6]:port, unix:/path)\n"
"      --redis URL     override 'redis' (same forms as the directive)\n"
"  -d, --debug         log-level debug (kept across reloads)\n"
"  -v, --version       print the version, the hiredis/libev versions and\n"
"                      whether this build has TLS to Redis (tls: yes|no)\n"
"  -h, --help          this text\n"
"\n"
"Configuration directives (one per line, '#' comments):\n";

/* --help's text after the directive list, which config_print_directives()
 * prints from the parser's table. */
static const char main_usage_tail[] =
"\n"
"Signals: SIGTERM/SIGINT drain (stop accepting, finish in-flight decisions,\n"
"exit 0); SIGHUP reloads the file: policies, overrides, redis, redis-timeout,\n"
"log-level, metrics, max-*, *-timeout, deny-cache change live, connections\n"
"stay open; listen and threads need a restart; a bad file (or a pool's\n"
"window made longer, or on Redis Cluster a policy's pool changed) is logged\n"
"as 'file:line: reason' and the running configuration stays. A new Redis is\n"
"set up before the old one is dropped; a reload is all or nothing.\n"
"Logs: one key=value line per event on stderr. Exit status: 0 ok, 1 error.\n"
"Durations: 50ms, 1s, 10m, 1h. Redis key of each window of a request:\n"
"<policy>:limit:v1:{<key>}:<window> (algorithm=gcra: <policy>:limit:g1:{<key>};\n"
"pool= on cluster://: {<pool>}/<key> for {<key>}).\n";

/* The --help text to <f>: options, the directives (from the parser's
 * table), signals. */
static void main_print_usage(FILE *f)
{
	fputs(main_usage, f);
	config_print_directives(f);
	fputs(main_usage_tail, f);
}

/* Parse, merge flags, validate. Returns 0 or -1 with <err>. <c> is filled
 * on success and must be released by the caller either way. */
static int main_load_config(struct main_state *m, struct config *c, char *err, size_t errlen)
{
	config_init(c);
	if (m->cfg_path && config_load_file(c, m->cfg_path, err, errlen) == -1)
		return -1;
	if (m->opt_listen)
		snprintf(c->listen, sizeof(c->listen), "%s", m->opt_listen);
	if (m->opt_redis)
		snprintf(c->redis, sizeof(c->redis), "%s", m->opt_redis);
	config_tag_pool_accounts(c);
	return config_validate(c, err, errlen);
}

/* Lines of <c>'s warnings not kept in its buffer (it was full). */
static unsigned main_warnings_cut(const struct config *c)
{
	unsigned kept = 0;
	const char *p;

	for (p = c->warnings; (p = strchr(p, '\n')); p++)
		kept++;
	return c->nwarnings - kept;
}

/* Log each of <c>'s parse warnings at warn (startup and reload). */
static void main_log_warnings(const struct config *c)
{
	char q[LOG_QUOTED_MAX(CONFIG_ERR_LEN)];
	const char *p = c->warnings, *nl;

	for (; (nl = strchr(p, '\n')); p = nl + 1)
		log_warn("config_warning", "detail=%s", log_quote(q, sizeof(q), p, (size_t)(nl - p)));
	if (main_warnings_cut(c))
		log_warn("config_warning", "more=%u", main_warnings_cut(c));
}

/*
 * Tell systemd <state> ("READY=1", ...) for a Type=notify unit: one
 * datagram to $NOTIFY_SOCKET (a path, or '@' for the abstract namespace).
 * Nothing happens without it, and a failure is not an error: the protocol
 * is small enough not to need libsystemd.
 */
static void main_sd_notify(const char *state)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sun;
	size_t len;
	int fd;

	if (!path || (path[0] != '/' && path[0] != '@'))
		return;
	len = strlen(path);
	if (len >= sizeof(sun.sun_path))
		return;
	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	memcpy(sun.sun_path, path, len);
	if (sun.sun_path[0] == '@')
		sun.sun_path[0] = '\0';
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd == -1)
		return;
	if (sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sun,
	           (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len)) == -1)
		log_debug("sd_notify_failed", "state=%s reason=\"%s\"", state, strerror(errno));
	close(fd);
}

/* ------------------------------------------------------------ listener */

static void main_on_accept_resume(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct main_state *m = t->data;

	(void)revents;
	if (!m->stopping)
		ev_io_start(loop, &m->accept_w);
}

static void main_on_accept(struct ev_loop *loop, ev_io *w, int revents)
{
	struct main_state *m = w->data;
	int fd, one = 1, i;

	(void)revents;
	for (i = 0; i < 64; i++) {
		fd = accept4(m->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd == -1) {
			if (errno == EMFILE || errno == ENFILE) {
				/* out of fds: pause instead of spinning on a ready listener */
				log_warn("accept_paused", "reason=\"%s\"", strerror(errno));
				ev_io_stop(loop, &m->accept_w);
				ev_timer_set(&m->accept_pause, 0.1, 0.0);
				ev_timer_start(loop, &m->accept_pause);
			}
			return;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		/* counted here, before a worker sees it: a burst accepted in one
		 * go must not get past the cap while the workers catch up */
		if (atomic_fetch_add_explicit(&m->admitted, 1, memory_order_relaxed) >=
		    m->cfg.max_connections) {
			conn_release(&m->admitted);
			log_warn("conn_refused", "reason=\"max-connections %u reached\"",
			         m->cfg.max_connections);
			metrics_add(&m->metrics.conn_rejected, 1);
			conn_refuse(fd, SPOP_ST_RES, "too many connections");
			continue;
		}
		worker_give_fd(m->workers[m->next_worker++ % m->nworkers], fd);
	}
}

/* ------------------------------------------------------------- signals */

static void main_on_term(struct ev_loop *loop, ev_signal *s, int revents)
{
	struct main_state *m = s->data;
	double grace;
	unsigned i;

	(void)revents;
	if (m->stopping)
		return;
	m->stopping = true;
	log_info("draining", "signal=%d workers=%u", s->signum, m->nworkers);
	main_sd_notify("STOPPING=1");
	ev_io_stop(loop, &m->accept_w);
	ev_timer_stop(loop, &m->accept_pause);
	close(m->listen_fd);
	m->listen_fd = -1;
	net_unix_remove(&m->unix_sock);
	/* in-flight decisions end within the Redis deadline; leave room for it */
	grace = 2.0 + 4.0 * (double)m->cfg.redis_timeout_ms / 1000.0;
	for (i = 0; i < m->nworkers; i++)
		worker_drain(m->workers[i], grace);
	ev_break(loop, EVBREAK_ALL);
}

/* Render every worker's counters and the main thread's (<arg> is the
 * main_state) into <dst>/<cap>; http_handler_fn contract. Main thread. */
static int main_render_metrics(void *arg, char *dst, size_t cap, int *status)
{
	struct main_state *m = arg;
	const struct metrics *ms[CONFIG_THREADS_MAX + 1];
	struct metrics_process proc;
	unsigned i;
	int n, k;

	(void)status;
	for (i = 0; i < m->nworkers; i++)
		ms[i] = worker_metrics(m->workers[i]);
	ms[i] = &m->metrics;
	n = metrics_render(ms, m->nworkers + 1, &m->cfg, SPOA_VERSION, dst, cap);
	/* without /proc (a chroot, another OS) the process_* families are left out */
	if (n < 0 || proc_read_self(&proc) == -1)
		return n;
	k = metrics_render_process(&proc, dst + n, cap - (size_t)n);
	return k < 0 ? -1 : n + k;
}

/* <fmt> into <dst>/<cap> as an http_handler_fn body: length, or -1 when it
 * does not fit. */
__attribute__((format(printf, 3, 4)))
static int main_http_text(char *dst, size_t cap, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(dst, cap, fmt, ap);
	va_end(ap);
	return n < 0 || (size_t)n >= cap ? -1 : n;
}

/* GET /healthz (liveness): 200 while SPOP is served, i.e. the listener is
 * open and every worker's loop turned lately; 503 with the reason else. */
static int main_http_healthz(void *arg, char *dst, size_t cap, int *status)
{
	struct main_state *m = arg;
	unsigned i, stuck = 0;

	for (i = 0; i < m->nworkers; i++)
		if (!worker_alive(m->workers[i], MAIN_WORKER_SILENCE_US))
			stuck++;
	if (m->stopping || m->listen_fd == -1) {
		*status = 503;
		return main_http_text(dst, cap, "not serving: draining\n");
	}
	if (stuck) {
		*status = 503;
		return main_http_text(dst, cap, "not serving: %u of %u workers stuck\n", stuck,
		                      m->nworkers);
	}
	return main_http_text(dst, cap, "ok\n");
}

/* GET /readyz (readiness): 200 only while every worker can decide (every
 * Redis link it needs up with the script loaded, no evicting Redis unless
 * allowed); 503 with a one-line reason else. */
static int main_http_readyz(void *arg, char *dst, size_t cap, int *status)
{
	struct main_state *m = arg;
	char why[160] = "", first[160] = "";
	unsigned i, down = 0, first_id = 0;
	char *p;

	if (m->stopping) {
		*status = 503;
		return main_http_text(dst, cap, "not ready: draining\n");
	}
	for (i = 0; i < m->nworkers; i++) {
		if (worker_ready(m->workers[i], why, sizeof(why)))
			continue;
		if (!down++) {
			memcpy(first, why, sizeof(first));
			first_id = i;
		}
	}
	if (!down)
		return main_http_text(dst, cap, "ready\n");
	/* one line, whatever a Redis error reply held */
	for (p = first; *p; p++)
		if ((unsigned char)*p < 0x20)
			*p = ' ';
	*status = 503;
	return main_http_text(dst, cap, "not ready: %u of %u workers cannot decide (worker %u: %s)\n",
	                      down, m->nworkers, first_id, first);
}

static const struct http_route main_http_routes[] = {
	{ "/metrics", "text/plain; version=0.0.4; charset=utf-8", main_render_metrics },
	{ "/healthz", "text/plain; charset=utf-8", main_http_healthz },
	{ "/readyz", "text/plain; charset=utf-8", main_http_readyz },
};

/* The metrics and health endpoint on <addr>; see http_new(). */
static struct http_server *main_http_new(struct main_state *m, const char *addr,
                                         char *err, size_t errlen)
{
	return http_new(m->loop, addr, main_http_routes,
	                sizeof(main_http_routes) / sizeof(main_http_routes[0]), m, err, errlen);
}

/*
 * Reorder the policies of <next> so that every policy also in <prev> keeps
 * its index there. Counters are kept per policy index (metrics.h), so this
 * keeps a policy's series continuous across a reload that adds policies
 * anywhere in the file; new policies take the free indices in file order.
 * A removed policy frees an index; the workers move counters by name for
 * the policies that had to change index (worker_apply_config).
 */
static void main_keep_policy_slots(const struct config *prev, struct config *next)
{
	struct window_policy slots[CONFIG_MAX_POLICIES];
	bool taken[CONFIG_MAX_POLICIES] = { false }, placed[CONFIG_MAX_POLICIES] = { false };
	size_t i, j, n = next->npolicies;

	memset(slots, 0, sizeof(slots));
	for (i = 0; i < n; i++) {
		const struct window_policy *p = &next->policies[i];
		const struct window_policy *old = config_find_policy(prev, p->name, p->name_len);

		j = old ? (size_t)(old - prev->policies) : n;
		if (j < n && !taken[j]) {
			slots[j] = *p;
			taken[j] = true;
			placed[i] = true;
		}
	}
	for (i = 0, j = 0; i < n; i++) {
		if (placed[i])
			continue;
		while (taken[j])
			j++;
		slots[j] = next->policies[i];
		taken[j] = true;
	}
	/* the override tables move with their policy: ownership unchanged */
	memcpy(next->policies, slots, n * sizeof(*slots));
}

/* Point the metrics endpoint at <next>'s address if it changed. On failure
 * the old endpoint stays and <next> records its address, so the next reload
 * compares against what really runs. */
static void main_reload_metrics(struct main_state *m, struct config *next)
{
	struct http_server *h = NULL;
	char err[CONFIG_ERR_LEN];

	if (strcmp(next->metrics, m->cfg.metrics) == 0)
		return;
	if (next->metrics[0]) {
		/* the old endpoint may hold the port the new one wants
		 * ("localhost:9102" after "127.0.0.1:9102"): then close it and
		 * try again, rather than close first and risk ending with none */
		h = main_http_new(m, next->metrics, err, sizeof(err));
		if (!h && m->http) {
			http_free(m->http);
			m->http = NULL;
			h = main_http_new(m, next->metrics, err, sizeof(err));
		}
		if (!h) {
			log_error("metrics_reload_failed", "error=\"%s\" action=\"metrics endpoint %s\"",
			          err, m->http ? "unchanged" : "off");
			snprintf(next->metrics, sizeof(next->metrics), "%s",
			         m->http ? m->cfg.metrics : "");
			return;
		}
	}
	if (m->http)
		http_free(m->http);
	m->http = h;
	if (!h)
		log_info("metrics_stopped", "addr=%s", m->cfg.metrics);
}

/* The reload in progress has every worker's verdict: commit on all of
 * them, or (any failed) abort on all of them. Counted and logged here,
 * from what the workers did. */
static void main_reload_finish(struct main_state *m, unsigned nfailed, const char *why)
{
	enum reload_cmd cmd = nfailed ? RELOAD_CMD_ABORT : RELOAD_CMD_COMMIT;
	unsigned i;

	if (worker_reload_step(&m->reload, nfailed ? RELOAD_EV_FAIL : RELOAD_EV_READY,
	                       -1, m->reload_seq) == -1)
		return;
	for (i = 0; i < m->nworkers; i++)
		worker_finish_config(m->workers[i], m->reload_seq, cmd);
	cfg_gen_put(m->staged_gen);
	m->staged_gen = NULL;
	worker_reload_step(&m->reload, reload_cmd_event(cmd), -1, m->reload_seq);
	if (cmd == RELOAD_CMD_ABORT) {
		config_release(&m->staged);
		metrics_add(&m->metrics.config_reloads[METRICS_RELOAD_FAILURE], 1);
		log_error("reload_failed", "workers_failed=%u reason=\"%s\" "
		          "action=\"keeping the running configuration\"", nfailed, why);
		main_sd_notify("READY=1");
		return;
	}
	/* the workers never read the metrics address: their generation may
	 * keep the asked one */
	main_reload_metrics(m, &m->staged);
	if (m->control && live_control_reconfigure(m->control, &m->staged) == -1)
		log_warn("live_reconfigure_failed", "reason=\"out of memory\" "
		         "action=\"live overrides keep the previous configuration's Redis\"");
	config_release(&m->cfg);
	m->cfg = m->staged;
	memset(&m->staged, 0, sizeof(m->staged));
	log_set_level(m->debug ? CONFIG_LOG_DEBUG : m->cfg.log_level);
	main_log_warnings(&m->cfg);
	metrics_add(&m->metrics.config_reloads[METRICS_RELOAD_SUCCESS], 1);
	log_info("reloaded", "file=%s policies=%zu log_level=%s metrics=%s",
	         m->cfg_path ? m->cfg_path : "-", m->cfg.npolicies,
	         config_log_level_str(log_get_level()),
	         m->cfg.metrics[0] ? m->cfg.metrics : "off");
	main_sd_notify("READY=1");
}

static void main_on_hup(struct ev_loop *loop, ev_signal *s, int revents);

/* A worker posted a verdict: once all are in, finish the reload; then run
 * a SIGHUP that arrived meanwhile. */
static void main_on_reload_done(struct ev_loop *loop, ev_async *a, int revents)
{
	struct main_state *m = a->data;
	char err[256], why[300] = "";
	unsigned i, nfailed = 0;
	bool ok;

	(void)revents;
	if (m->reload != RELOAD_PREPARING)
		return;
	for (i = 0; i < m->nworkers; i++) {
		if (!worker_config_result(m->workers[i], m->reload_seq, &ok, err, sizeof(err)))
			return;   /* not all in yet */
		if (!ok && nfailed++ == 0)
			snprintf(why, sizeof(why), "worker %u: %s", i, err);
	}
	main_reload_finish(m, nfailed, why);
	if (m->reload_again && !m->stopping) {
		m->reload_again = false;
		main_on_hup(loop, &m->sig_hup, 0);
	}
}

/*
 * SIGHUP: parse the file again and ask every worker to prepare the new
 * generation (main_on_reload_done finishes it). A file that does not parse
 * or validate changes nothing and is logged with its "file:line: reason";
 * a generation that a worker cannot prepare (e.g. the new Redis cannot be
 * reached or set up) changes nothing either: all workers or none.
 */
static void main_on_hup(struct ev_loop *loop, ev_signal *s, int revents)
{
	struct main_state *m = s->data;
	struct config next;
	char err[CONFIG_ERR_LEN];
	unsigned i;

	(void)loop;
	(void)revents;
	if (m->reload != RELOAD_IDLE) {
		/* one at a time: this one reads the file once the current is done */
		m->reload_again = true;
		return;
	}
	log_info("reloading", "file=%s", m->cfg_path ? m->cfg_path : "-");
	main_sd_notify("RELOADING=1");
	if (main_load_config(m, &next, err, sizeof(err)) == -1 ||
	    config_check_pool_reload(&m->cfg, &next, m->cfg_path, err, sizeof(err)) == -1)
		goto rejected;
	if (strcmp(next.listen, m->cfg.listen) != 0 || next.threads != m->cfg.threads)
		log_warn("reload_partial", "reason=\"listen and threads change only on restart\"");
	/* keep what cannot change live, so the next comparison stays honest */
	snprintf(next.listen, sizeof(next.listen), "%s", m->cfg.listen);
	next.threads = m->cfg.threads;
	main_keep_policy_slots(&m->cfg, &next);
	m->staged_gen = cfg_gen_new(&next);
	if (!m->staged_gen) {
		snprintf(err, sizeof(err), "out of memory");
		goto rejected;
	}
	m->staged = next;
	worker_reload_step(&m->reload, RELOAD_EV_PREPARE, -1, ++m->reload_seq);
	for (i = 0; i < m->nworkers; i++)
		worker_prepare_config(m->workers[i], m->staged_gen, m->reload_seq);
	return;
rejected:
	metrics_add(&m->metrics.config_reloads[METRICS_RELOAD_FAILURE], 1);
	log_error("reload_rejected", "error=\"%s\" action=\"keeping the running configuration\"", err);
	config_release(&next);
	main_sd_notify("READY=1");
}

static void main_print_version(void)
{
	printf("ratelimit-spoa %s (hiredis %d.%d.%d, libev %d.%d, tls: %s)\n", SPOA_VERSION,
	       HIREDIS_MAJOR, HIREDIS_MINOR, HIREDIS_PATCH, ev_version_major(),
	       ev_version_minor(), SPOA_TLS_STR);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "config", required_argument, NULL, 'f' },
		{ "check", no_argument, NULL, 'c' },
		{ "listen", required_argument, NULL, 'L' },
		{ "redis", required_argument, NULL, 'R' },
		{ "routes", required_argument, NULL, 'M' },
		{ "plans", required_argument, NULL, 'P' },
		{ "debug", no_argument, NULL, 'd' },
		{ "version", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct main_state m;
	struct cfg_gen *g = NULL;
	char err[CONFIG_ERR_LEN];
	bool check_only = false, debug = false;
	const char *routes = NULL, *plan_maps[4];
	int nroutes = 0;
	unsigned nplan_maps = 0;
	unsigned i;
	int opt, rc = 1;

	/* a subcommand, before any option of the agent's */
	if (argc > 1 && strcmp(argv[1], "ctl") == 0)
		return ctl_main(argc - 1, argv + 1);
	memset(&m, 0, sizeof(m));
	m.listen_fd = -1;
	while ((opt = getopt_long(argc, argv, "f:cdvh", longopts, NULL)) != -1) {
		switch (opt) {
		case 'f': m.cfg_path = optarg; break;
		case 'c': check_only = true; break;
		case 'L': m.opt_listen = optarg; break;
		case 'R': m.opt_redis = optarg; break;
		case 'M': routes = optarg; break;
		case 'P':
			if (nplan_maps == sizeof(plan_maps) / sizeof(plan_maps[0])) {
				fputs("ratelimit-spoa: at most 4 --plans maps\n", stderr);
				return 1;
			}
			plan_maps[nplan_maps++] = optarg;
			break;
		case 'd': debug = true; break;
		case 'v': main_print_version(); return 0;
		case 'h': main_print_usage(stdout); return 0;
		default: main_print_usage(stderr); return 1;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "ratelimit-spoa: unexpected argument '%s'\n", argv[optind]);
		return 1;
	}
	if (main_load_config(&m, &m.cfg, err, sizeof(err)) == -1) {
		fprintf(stderr, "%s\n", err);
		config_release(&m.cfg);
		return 1;
	}
	if ((routes || nplan_maps) && !check_only) {
		fputs("ratelimit-spoa: --routes and --plans go with -c\n", stderr);
		config_release(&m.cfg);
		return 1;
	}
	if (routes)
		nroutes = config_check_routes_file(&m.cfg, routes, err, sizeof(err));
	for (i = 0; i < nplan_maps && nroutes != -1; i++)
		if (config_check_plans_map_file(&m.cfg, plan_maps[i], err, sizeof(err)) == -1)
			nroutes = -1;
	if (nroutes == -1) {
		fprintf(stderr, "%s\n", err);
		config_release(&m.cfg);
		return 1;
	}
	if (check_only) {
		fputs(m.cfg.warnings, stderr);
		if (main_warnings_cut(&m.cfg))
			fprintf(stderr, "(%u more warnings)\n", main_warnings_cut(&m.cfg));
		printf("%s: configuration is valid (%zu policies)\n",
		       m.cfg_path ? m.cfg_path : "(defaults)", m.cfg.npolicies);
		if (routes)
			printf("%s: %d routes, every policy they name is defined\n", routes, nroutes);
		config_release(&m.cfg);
		return 0;
	}
	m.debug = debug;
	if (debug)
		m.cfg.log_level = CONFIG_LOG_DEBUG;
	log_set_level(m.cfg.log_level);
	main_log_warnings(&m.cfg);
	signal(SIGPIPE, SIG_IGN);
	/* argv is world-readable (ps, /proc): say so rather than refuse, a
	 * one-off debugging run may want it */
	if (m.opt_redis && strchr(m.opt_redis, '@'))
		log_warn("secret_in_argv", "reason=\"--redis carries credentials, visible in ps\" "
		         "fix=\"put them in the config file or RATELIMIT_SPOA_REDIS_PASSWORD_FILE\"");

	m.loop = ev_default_loop(EVFLAG_AUTO);
	/* Handlers first: a SIGHUP sent as soon as the port answers (or right
	 * after `systemctl start`) must not kill the agent with the default
	 * action. Signals wait for ev_run(), when everything below exists. */
	ev_signal_init(&m.sig_term, main_on_term, SIGTERM);
	ev_signal_init(&m.sig_int, main_on_term, SIGINT);
	ev_signal_init(&m.sig_hup, main_on_hup, SIGHUP);
	m.sig_term.data = m.sig_int.data = m.sig_hup.data = &m;
	ev_signal_start(m.loop, &m.sig_term);
	ev_signal_start(m.loop, &m.sig_int);
	ev_signal_start(m.loop, &m.sig_hup);
	ev_async_init(&m.reload_done, main_on_reload_done);
	m.reload_done.data = &m;
	ev_async_start(m.loop, &m.reload_done);
	m.listen_fd = net_listen(m.cfg.listen, &m.unix_sock, err, sizeof(err));
	if (m.listen_fd == -1) {
		log_error("startup_failed", "error=\"%s\"", err);
		goto out;
	}
	g = cfg_gen_new(&m.cfg);
	if (!g) {
		log_error("startup_failed", "error=\"out of memory\"");
		goto out;
	}
	m.denied = denied_new();
	m.live = live_new();
	if (m.denied && m.live)
		m.control = live_control_new(&m.cfg, m.live, &m.metrics, m.denied, err, sizeof(err));
	if (!m.control) {
		log_error("startup_failed", "error=\"%s\"", m.denied && m.live ? err : "out of memory");
		goto out;
	}
	m.nworkers = m.cfg.threads < 1 ? 1 : m.cfg.threads > CONFIG_THREADS_MAX ? CONFIG_THREADS_MAX : m.cfg.threads;
	for (i = 0; i < m.nworkers; i++) {
		m.workers[i] = worker_new(i, g, spoa_script, spoa_script_len, &m.admitted,
		                          err, sizeof(err));
		if (m.workers[i]) {
			worker_set_reply(m.workers[i], m.loop, &m.reload_done);
			worker_set_live(m.workers[i], m.live, m.denied);
		}
		if (!m.workers[i] || worker_start(m.workers[i], err, sizeof(err)) == -1) {
			log_error("startup_failed", "worker=%u error=\"%s\"", i, err);
			goto out;
		}
	}
	if (m.cfg.metrics[0]) {
		m.http = main_http_new(&m, m.cfg.metrics, err, sizeof(err));
		if (!m.http) {
			log_error("startup_failed", "error=\"%s\"", err);
			goto out;
		}
	}
	ev_io_init(&m.accept_w, main_on_accept, m.listen_fd, EV_READ);
	m.accept_w.data = &m;
	ev_io_start(m.loop, &m.accept_w);
	ev_timer_init(&m.accept_pause, main_on_accept_resume, 0.1, 0.0);
	m.accept_pause.data = &m;
	log_info("started", "version=%s listen=%s threads=%u policies=%zu metrics=%s",
	         SPOA_VERSION, m.cfg.listen, m.nworkers, m.cfg.npolicies,
	         m.cfg.metrics[0] ? m.cfg.metrics : "off");
	main_sd_notify("READY=1");

	ev_run(m.loop, 0);

	for (i = 0; i < m.nworkers; i++)
		worker_join(m.workers[i]);
	log_info("stopped", "reason=drained");
	rc = 0;
out:
	for (i = 0; i < m.nworkers; i++) {
		if (m.workers[i]) {
			worker_drain(m.workers[i], 0.0);
			worker_join(m.workers[i]);
			worker_free(m.workers[i]);
		}
	}
	if (g)
		cfg_gen_put(g);
	if (m.reload != RELOAD_IDLE) {
		/* stopped in the middle of a reload: the workers dropped theirs */
		cfg_gen_put(m.staged_gen);
		config_release(&m.staged);
	}
	if (m.http)
		http_free(m.http);
	/* after the workers: they read the table until they stop; the
	 * thread before the table it fills and the counts it flushes */
	live_control_free(m.control);
	live_free(m.live);
	denied_free(m.denied);
	if (m.listen_fd != -1) {
		close(m.listen_fd);
		net_unix_remove(&m.unix_sock);
	}
	config_release(&m.cfg);
	if (m.loop)
		ev_loop_destroy(m.loop);
	return rc;
}
