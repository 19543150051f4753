# ratelimit-spoa agent image (used by compose.yaml). `make demo` needs no
# Docker; this is for running the same topology in containers.
#
#   docker build -t ratelimit-spoa .
#   docker run --rm ratelimit-spoa -c -f /etc/ratelimit-spoa/ratelimit-spoa.conf
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
# The policies are those of the shipped config (the project's one policies file).
COPY etc/ratelimit-spoa.conf /etc/ratelimit-spoa/ratelimit-spoa.conf.dist
# In a container the agent listens on the container network (HAProxy runs in
# another container), which the agent refuses unless told so explicitly.
RUN { echo "listen 0.0.0.0:12345"; \
      echo "allow-remote-listen"; \
      echo "redis redis://redis:6379/0"; \
      echo "redis-timeout 50ms"; \
      grep -E '^(policy|override)[[:space:]]' /etc/ratelimit-spoa/ratelimit-spoa.conf.dist; } \
      > /etc/ratelimit-spoa/ratelimit-spoa.conf \
 && ratelimit-spoa -c -f /etc/ratelimit-spoa/ratelimit-spoa.conf
USER nobody
EXPOSE 12345
ENTRYPOINT ["/usr/local/sbin/ratelimit-spoa"]
CMD ["-f", "/etc/ratelimit-spoa/ratelimit-spoa.conf"]
