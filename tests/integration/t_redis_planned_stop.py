#!/usr/bin/env python3
"""A planned stop is logged as planned (issue 19 item 8). SIGTERM (every
deploy) and a reload that moves Redis close the agent's Redis links on
purpose: each is one `level=info event=redis_closed` line with its reason,
and nothing at warn or error, so log-based alerts see no outage. Redis
going away by itself still logs `level=warn event=redis_disconnected`."""
import os
import signal
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Harness, free_port, wait_port  # noqa: E402
import harness as u  # noqa: E402
import spop  # noqa: E402

h = Harness()
h.start_redis()
mport = free_port()
h.start_agent("metrics 127.0.0.1:%d\nthreads 2\npolicy transfer 100/1m\n" % mport)
h.check("agent ready", u.wait_ready(mport, 2) and wait_port(mport))
c = spop.Conn().connect("127.0.0.1", h.agent_port)
c.hello()
h.eq("a decision", "allow", c.ratelimit("PLANNED")["actions"]["status"])
c.close()


def lines_from(n):
    return u.log_text(h).splitlines()[n:]


def bad(lines):
    return [l for l in lines if " level=warn " in l or " level=error " in l]


# a reload to another Redis: the old links close on purpose
other = free_port()
# (redis_server_argv: with the module when the suite runs on it)
other_redis = h.spawn(u.redis_server_argv(other, h.tmp), os.path.join(h.tmp, "redis-other.log"))
h.check("second redis up", wait_port(other))
mark = len(u.log_text(h).splitlines())
old_port, h.redis_port = h.redis_port, other
u.write_conf(h, "threads 2\npolicy transfer 100/1m\n", metrics_port=mport)
h.check("reload to the other Redis applied", u.hup(h, workers=2, timeout=20))
h.check("the old links: redis_closed at info, reason named",
        u.wait_for(lambda: sum(1 for l in lines_from(mark)
                               if "level=info event=redis_closed" in l) >= 2, 10),
        lines_from(mark))
h.eq("nothing at warn or error for the planned move", [], bad(lines_from(mark)))

# SIGTERM: a deploy
mark = len(u.log_text(h).splitlines())
h.eq("SIGTERM: exit 0", 0, h.stop(h.agent))
after = lines_from(mark)
h.check("each worker's link: redis_closed at info with reason=\"shutdown\" (%d)"
        % sum(1 for l in after if 'event=redis_closed' in l and 'reason="shutdown"' in l),
        sum(1 for l in after if "level=info event=redis_closed" in l and 'reason="shutdown"' in l) == 2,
        after)
h.eq("no redis_disconnected for a planned stop", [], [l for l in after if "redis_disconnected" in l])
h.eq("nothing at warn or error on SIGTERM", [], bad(after))

# an unplanned loss still warns
h.redis_port = other
h.start_agent("metrics 127.0.0.1:%d\nthreads 2\npolicy transfer 100/1m\n" % mport)
h.check("agent ready again", u.wait_ready(mport, 2))
h.stop(other_redis)
h.check("Redis gone by itself: redis_disconnected at warn",
        u.wait_log(h, "level=warn event=redis_disconnected", 1, 10))
h.stop(h.agent)
h.done()
