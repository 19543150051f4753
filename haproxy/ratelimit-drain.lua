-- ratelimit-spoa: the edge's HTTP/2 denials of a request whose body is still
-- arriving. Loaded by ratelimit-edge.cfg (lua-load-per-thread) and used by
-- ratelimit-frontend.cfg's "use-service lua.ratelimit_drain" line.
--
-- Why: an answer HAProxy gives by itself ("http-request deny", "return")
-- drops the rest of the request; on HTTP/2 that resets a stream the client is
-- still sending on (RST_STREAM CANCEL on 2.6), and clients such as curl then
-- drop the 401/429 they were sent. The answer of a service instead lets the
-- body pass: this one reads the body to its end (at most RL_DRAIN_MAX bytes,
-- 1 MiB unless set), discarding it, and then answers with the denial's status
-- and no body. ratelimit-edge.cfg's "http-response return" lines replace that
-- answer with the one "http-request deny" sends, now that the stream can end
-- cleanly. A body above the cap (by its Content-Length, or as it arrives) is
-- not read further: the answer then ends the stream as a deny does.

local drain_max = tonumber(os.getenv("RL_DRAIN_MAX") or "") or 1048576

core.register_service("ratelimit_drain", "http", function(applet)
    local clen = tonumber(applet.headers["content-length"] and applet.headers["content-length"][0] or "")
    local seen = 0
    if not clen or clen <= drain_max then
        while seen <= drain_max do
            local data = applet:receive(16384)
            if data == nil or data == "" then break end
            seen = seen + #data
        end
    end
    -- The denial's status, in the order of the deny lines, so that the
    -- answer is a refusal even where the return lines did not run.
    local status = 503
    if applet:get_var("txn.rl_action") == "401" then
        status = 401
    elseif applet:get_var("txn.rl.status") == "deny" then
        status = 429
    end
    applet:set_var("txn.rl_drained", 1)
    applet:set_status(status)
    applet:add_header("content-length", "0")
    applet:start_response()
end)
