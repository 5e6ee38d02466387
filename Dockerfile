# syntax=docker/dockerfile:1
# One Strongroom image; every service is an entry point of it (the chart sets the command):
#   strongroom-persistence   one member of a persistence cluster
#   strongroom-realm         the realm service
#   strongroom               the CLI (realm apply, status, publish, drills)
#   python -m strongroom.drill_k8s agent   the in-cluster half of the Kubernetes failover drill
ARG PYTHON_VERSION=3.11

FROM python:${PYTHON_VERSION}-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# Dependencies first, so a code change does not reinstall them.
COPY pyproject.toml README.md ./
RUN python -m venv /opt/strongroom \
 && mkdir -p services/strongroom && touch services/strongroom/__init__.py \
 && /opt/strongroom/bin/pip install . \
 && /opt/strongroom/bin/pip uninstall -y strongroom
COPY services ./services
# Compiled now: the root filesystem is read-only at run time.
RUN /opt/strongroom/bin/pip install --no-deps . \
 && /opt/strongroom/bin/python -m compileall -q /opt/strongroom/lib

FROM python:${PYTHON_VERSION}-slim-bookworm
LABEL org.opencontainers.image.title="strongroom" \
      org.opencontainers.image.description="Strongroom: a replicated, persistent message store"
RUN groupadd --system --gid 10001 strongroom \
 && useradd --system --uid 10001 --gid strongroom --home-dir /var/lib/strongroom \
            --shell /usr/sbin/nologin strongroom \
 && install -d -o strongroom -g strongroom /var/lib/strongroom
COPY --from=build /opt/strongroom /opt/strongroom
ENV PATH=/opt/strongroom/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
# Numeric, so Kubernetes' runAsNonRoot can check it.
USER 10001:10001
WORKDIR /var/lib/strongroom
# 7101: persistence members (clients, peers, health); 7400: the realm service.
EXPOSE 7101 7400
CMD ["strongroom", "--help"]
