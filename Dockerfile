# ratelimit-spoa agent image (used by compose.yaml), and a Redis image with
# the module loaded (target "redis", compose.yaml's redis service). `make
# demo` needs no Docker; this is for running the same topology in
# containers.
#
#   docker build -t ratelimit-spoa .
#   docker run --rm -v $PWD/etc/ratelimit-spoa.conf:/etc/ratelimit-spoa/ratelimit-spoa.conf:ro \
#       ratelimit-spoa -c -f /etc/ratelimit-spoa/ratelimit-spoa.conf
FROM debian:bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential pkg-config libev-dev libhiredis-dev \
    dpkg-dev debian-archive-keyring \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Makefile VERSION ./
COPY spoa/ spoa/
COPY lua/ lua/
COPY module/ module/
COPY tools/ tools/
# (the module's redismodule.h comes from Debian's redis source package,
# fetched by make into build/)
RUN make spoa/ratelimit-spoa module/ratelimit.so

# Redis with RATELIMIT.DECIDE (docs/deployment.md, "The native decision").
FROM redis:7-bookworm AS redis
COPY --from=build /src/module/ratelimit.so /usr/local/lib/ratelimit-spoa/ratelimit.so
CMD ["redis-server", "--loadmodule", "/usr/local/lib/ratelimit-spoa/ratelimit.so"]

FROM debian:bookworm-slim AS agent
# openssl: tools/jwt.sh, which the compose "keys" service runs from this image.
RUN apt-get update \
 && apt-get install -y --no-install-recommends libev4 libhiredis0.14 openssl \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/spoa/ratelimit-spoa /usr/local/sbin/ratelimit-spoa
COPY tools/jwt.sh /usr/local/bin/jwt.sh
# No configuration in the image: mount it (compose.yaml mounts
# compose/agent.conf and the policies), e.g.
#   docker run -v $PWD/agent.conf:/etc/ratelimit-spoa/ratelimit-spoa.conf:ro ratelimit-spoa
RUN mkdir -p /etc/ratelimit-spoa
USER nobody
EXPOSE 12345 9102
ENTRYPOINT ["/usr/local/sbin/ratelimit-spoa"]
CMD ["-f", "/etc/ratelimit-spoa/ratelimit-spoa.conf"]
