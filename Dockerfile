# rtroute image: the sidecar (`rtroute run`), the proxy (`rtroute proxy`) and every other command.
#   docker build -t rtroute:0.1.0 .       (the name examples/deploy/kubernetes*.yaml use)
#   docker run -i --rm rtroute:0.1.0 route --bindings /dev/stdin '*.app1.mod1.info' < examples/bindings.toml
# Then tag and push it where the cluster pulls from (REGISTRY/rtroute:0.1.0).
#
# What was verified, and what was not: no container engine ran where this file was written,
# so this Dockerfile has NEVER been built. Its steps were run outside a container by
# scripts/build-dist.sh: the sdist built from a clean copy of the checkout, the wheel built
# from that sdist alone with RTROUTE_REQUIRE_NATIVE=1 (Python 3.9 to 3.13, 3.12 among them),
# and that wheel pip-installed into a fresh venv with no compiler on PATH, where the native core
# imported and `rtroute --version`, `rtroute route` and `rtroute demo` (against a RabbitMQ on
# 127.0.0.1:5672) passed. Not verified: the base images (python:3.12, python:3.12-slim), the
# .dockerignore, useradd, USER and the image's behaviour under Kubernetes.

ARG PYTHON=3.12

# --- build: the full image has gcc and the Python headers -------------------------------------
FROM python:${PYTHON} AS build
WORKDIR /src
COPY . .
# the sdist, then the wheel from the sdist alone (what `python -m build` does without flags);
# RTROUTE_REQUIRE_NATIVE=1: a core that does not compile fails the build instead of falling back
RUN pip install --no-cache-dir "build>=1.0" \
    && RTROUTE_REQUIRE_NATIVE=1 python -m build --outdir /dist .

# --- runtime: only the wheel and its dependencies (all from wheels: no compiler here) ----------
FROM python:${PYTHON}-slim
LABEL org.opencontainers.image.title="rtroute" org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="MPL-2.0"
COPY --from=build /dist/*.whl /tmp/
RUN python -m venv /opt/rtroute/venv \
    && /opt/rtroute/venv/bin/pip install --no-cache-dir /tmp/rtroute-*.whl \
    && rm /tmp/rtroute-*.whl \
    && /opt/rtroute/venv/bin/python -c "import rtroute.core as c; assert c.IMPLEMENTATION == 'native', c.FALLBACK_REASON" \
    && groupadd --system --gid 10001 rtroute \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin rtroute
ENV PATH=/opt/rtroute/venv/bin:$PATH PYTHONUNBUFFERED=1
USER 10001:10001
# 5680: proxy AMQP listener; ops HTTP, one port per role (docs/operations.md): 8419 the
# sidecar (rtroute run), 8420 shovels (rtroute shovel run), 8421 the proxy
EXPOSE 5680 8419 8420 8421
ENTRYPOINT ["rtroute"]
CMD ["--help"]
