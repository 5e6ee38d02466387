# syntax=docker/dockerfile:1
# One Strongroom image; every service is an entry point of it (the chart sets the command):
#   strongroom-persistence   one member of a persistence cluster
#   strongroom-realm         the realm service
#   strongroom-router        a routed cluster's router (wide-area stores)
#   strongroom-dr            a cluster's DR service at its standby site
#   strongroom               the CLI (realm apply, status, publish, drills)
#   python -m strongroom.drill_k8s agent   the in-cluster half of the Kubernetes failover drill
#   python -m strongroom.probe PORT        the chart's probes under TLS (gRPC health, mutual TLS)
#   spark-submit /opt/strongroom/spark_jobs/<job>.py   the Spark jobs (pyspark + Java 17); the
#       entry point turns Spark on Kubernetes' "driver" and "executor" pod arguments into the
#       driver's spark-submit and the executor's JVM (spark_jobs/entrypoint.sh)
ARG PYTHON_VERSION=3.11

FROM python:${PYTHON_VERSION}-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# Dependencies first, so a code change does not reinstall them.
COPY pyproject.toml README.md ./
RUN python -m venv /opt/strongroom \
 && mkdir -p services/strongroom spark_jobs && touch services/strongroom/__init__.py spark_jobs/__init__.py \
 && /opt/strongroom/bin/pip install '.[metrics]' \
 && /opt/strongroom/bin/pip uninstall -y strongroom
COPY services ./services
COPY spark_jobs ./spark_jobs
# Compiled now: the root filesystem is read-only at run time. The Spark jobs and pyspark (Spark's
# home) get fixed paths, so the chart can name them whatever the Python version.
RUN /opt/strongroom/bin/pip install --no-deps . \
 && /opt/strongroom/bin/python -m compileall -q /opt/strongroom/lib \
 && site=$(/opt/strongroom/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \
 && ln -s "$site/spark_jobs" /opt/strongroom/spark_jobs \
 && ln -s "$site/pyspark" /opt/strongroom/spark

FROM python:${PYTHON_VERSION}-slim-bookworm
# Java for Spark (bookworm's default JRE is 17, what Spark 4 needs).
RUN apt-get update \
 && apt-get install -y --no-install-recommends default-jre-headless \
 && rm -rf /var/lib/apt/lists/*
LABEL org.opencontainers.image.title="strongroom" \
      org.opencontainers.image.description="Strongroom: a replicated, persistent message store"
RUN groupadd --system --gid 10001 strongroom \
 && useradd --system --uid 10001 --gid strongroom --home-dir /var/lib/strongroom \
            --shell /usr/sbin/nologin strongroom \
 && install -d -o strongroom -g strongroom /var/lib/strongroom
COPY --from=build /opt/strongroom /opt/strongroom
ENV PATH=/opt/strongroom/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    JAVA_HOME=/usr/lib/jvm/default-java \
    SPARK_HOME=/opt/strongroom/spark \
    PYSPARK_PYTHON=/opt/strongroom/bin/python
# Numeric, so Kubernetes' runAsNonRoot can check it.
USER 10001:10001
WORKDIR /var/lib/strongroom
# 7101: persistence members (clients, peers, health); 7400: the realm service.
EXPOSE 7101 7400
ENTRYPOINT ["bash", "/opt/strongroom/spark_jobs/entrypoint.sh"]
CMD ["strongroom", "--help"]
