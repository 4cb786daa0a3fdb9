# The Strata CLI and services in one image (used by compose.yaml).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY schemas schemas
COPY ingest ingest
COPY projector projector
COPY binder binder
COPY scheduler scheduler
COPY strata strata
RUN pip install --no-cache-dir . && useradd --uid 10001 strata && mkdir /data && chown strata /data
USER strata
ENTRYPOINT []
CMD ["strata", "--help"]
