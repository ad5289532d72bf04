# syntax=docker/dockerfile:1
#
# capacity-plugins container image: one `capacity` entrypoint for every role.
#
#   docker build --target worker -t capacity-plugins:worker .   # load side: worker, simulate, gpu-agent
#   docker build -t capacity-plugins:full .                     # + the analysis (master, analyze, compare)
#
#   docker run --rm capacity-plugins:full run /etc/capacity/scenario.yaml --master --expect-workers 3 \
#       --master-bind-port 5557 --bind 0.0.0.0 --exporter-port 9646 --output /results
#   docker run --rm capacity-plugins:worker run /etc/capacity/scenario.yaml --worker --master-host MASTER
#   docker run --rm -p 8000:8000 capacity-plugins:worker simulate --host 0.0.0.0 --port 8000
#   docker run --rm --gpus all -p 9400:9400 capacity-plugins:worker gpu-agent --host 0.0.0.0 --port 9400
#
# Both targets install the same wheel; `full` adds the `analysis` extra (pandas, scipy,
# matplotlib, pyarrow), which only the master's end-of-run analysis and `capacity analyze` need.
# Sizes measured in docs/deploy.md. tests/test_deploy_image.py lints this file and runs its pip
# steps in a fresh venv.

# Pinned: the venvs built below link to this exact interpreter, so every stage uses the same one.
ARG PYTHON_IMAGE=python:3.11.16-slim-trixie

# -- the wheel: built once, installed by both venvs ----------------------------------------------
FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
# Only what the wheel is made of (README: the long description; LICENSE: license-files).
COPY pyproject.toml README.md LICENSE ./
COPY capacity_plugins ./capacity_plugins
RUN python -m pip wheel --no-cache-dir --no-deps --wheel-dir /wheels /src

# -- venvs: the worker's (load side only) and the full one (+ analysis) -------------------------
FROM ${PYTHON_IMAGE} AS venv-worker
COPY --from=wheel /wheels /wheels
# /wheels holds exactly one wheel; the glob keeps the version out of this file.
RUN python -m venv /opt/capacity \
    && /opt/capacity/bin/pip install --no-cache-dir /wheels/capacity_plugins-*.whl

FROM venv-worker AS venv-full
RUN set -- /wheels/capacity_plugins-*.whl \
    && /opt/capacity/bin/pip install --no-cache-dir "$1[analysis]"

# -- runtime: no compiler, no pip cache, a non-root user -----------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
# A fixed UID/GID so Kubernetes' runAsUser / fsGroup and volume ownership can name it.
RUN groupadd --system --gid 10001 capacity \
    && useradd --system --uid 10001 --gid capacity --home-dir /home/capacity --create-home capacity \
    && mkdir -p /results /etc/capacity \
    && chown capacity:capacity /results
ENV PATH=/opt/capacity/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MPLCONFIGDIR=/tmp/matplotlib
WORKDIR /home/capacity
USER 10001:10001
# Locust master (workers connect here), the live exporter, the simulator, the GPU agent.
EXPOSE 5557 9646 8000 9400
ENTRYPOINT ["capacity"]
CMD ["--help"]

FROM runtime AS worker
COPY --from=venv-worker /opt/capacity /opt/capacity

# Last stage = the default target.
FROM runtime AS full
COPY --from=venv-full /opt/capacity /opt/capacity
