"""`strata ui`: a read-only web UI over the cache log and the audit index (docs/ui.md).

``timeline`` keeps the cache at the versions the pages show (the live one, following the log,
and past ones, restored and folded forward, cached); ``derived`` keeps per-version figures that
would otherwise cost a pass over every task; ``views`` turns a snapshot and the audit index into
the pages' data (the same shapes as the CLI's ``-o json``); ``app`` and ``routes`` serve them
with Starlette, ``security`` guards every request.
"""
