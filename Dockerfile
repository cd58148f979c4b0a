# kafka-group-coordinator: a Kafka-compatible group coordinator (single node).
#
#   docker build -t kafka-group-coordinator .
#   docker run -p 9092:9092 -p 9464:9464 -v kgc-data:/var/lib/kgc \
#       -e KGC_ADVERTISED_LISTENER=localhost:9092 -e KGC_NUM_PARTITIONS=3 kafka-group-coordinator
#
# Configuration: KGC_<SETTING> environment variables (KGC_GROUP_INITIAL_REBALANCE_DELAY_MS=0, ...), a properties
# file mounted into the container with KGC_CONFIG=/etc/kgc/server.properties, or `--set NAME=VALUE` arguments
# after `serve`. docs/configuration.md lists every setting.
ARG PYTHON_IMAGE=python:3.11-slim

# -- build: a virtualenv with the project and its runtime dependencies only ---------------------------------
FROM ${PYTHON_IMAGE} AS build
# Where pip finds the dependencies: PyPI, unless a build without network is given a wheelhouse (podman build
# -v "$PWD/wheels:/wheels:ro" --build-arg PIP_NO_INDEX=1 --build-arg PIP_FIND_LINKS=/wheels), as
# tests/deploy/test_container.py does.
ARG PIP_NO_INDEX
ARG PIP_FIND_LINKS
WORKDIR /src
# The install steps live in one script that tests/deploy/test_image_filesystem.py runs too.
COPY docker/install.sh /usr/local/bin/kgc-install
# setup.py builds the optional compiled parts (storage._speedups, coordinator._speedups); the slim image has no C
# compiler, so there the install goes on without them and the group log is loaded by their Python twins.
COPY pyproject.toml setup.py README.md ./
COPY protocol/ protocol/
COPY storage/ storage/
COPY coordinator/ coordinator/
RUN ["/bin/sh", "/usr/local/bin/kgc-install", "/opt/kgc", "/src"]

# -- runtime ---------------------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="kafka-group-coordinator" \
      org.opencontainers.image.description="A Kafka wire-protocol group coordinator server"

RUN groupadd --system --gid 10001 kgc \
    && useradd --system --uid 10001 --gid kgc --home-dir /var/lib/kgc --no-create-home \
       --shell /usr/sbin/nologin kgc \
    && mkdir -p /var/lib/kgc /etc/kgc \
    && chown kgc:kgc /var/lib/kgc

COPY --from=build /opt/kgc /opt/kgc

# One worker: `-p 9092:9092` is then all a client needs. With KGC_COORDINATOR_WORKERS=auto (one per core) or N,
# worker w listens on 9092+w and is advertised there: publish those ports too (`-p 9092-9095:9092-9095`).
ENV PATH=/opt/kgc/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    KGC_DATA_DIR=/var/lib/kgc \
    KGC_COORDINATOR_WORKERS=1

USER 10001:10001
WORKDIR /var/lib/kgc
VOLUME ["/var/lib/kgc"]
# 9092: Kafka protocol; 9464: admin HTTP (/healthz, /readyz, /metrics, /v1).
EXPOSE 9092 9464

# Ready once the group log is loaded; follows KGC_ADMIN_LISTEN's port (no curl in the slim image).
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; port = os.environ.get('KGC_ADMIN_LISTEN', '0.0.0.0:9464').rsplit(':', 1)[-1]; urllib.request.urlopen('http://127.0.0.1:%s/readyz' % port, timeout=4)"]

STOPSIGNAL SIGTERM
ENTRYPOINT ["kafka-group-coordinator"]
CMD ["serve", "--data-dir", "/var/lib/kgc"]
