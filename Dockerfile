# ratelimit-spoa agent image (used by compose.yaml). `make demo` needs no
# Docker; this is for running the same topology in containers.
#
#   docker build -t ratelimit-spoa .
#   docker run --rm -v $PWD/etc/ratelimit-spoa.conf:/etc/ratelimit-spoa/ratelimit-spoa.conf:ro \
#       ratelimit-spoa -c -f /etc/ratelimit-spoa/ratelimit-spoa.conf
FROM debian:bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential pkg-config libev-dev libhiredis-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Makefile VERSION ./
COPY spoa/ spoa/
COPY lua/ lua/
COPY tools/ tools/
RUN make spoa/ratelimit-spoa

FROM debian:bookworm-slim
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
