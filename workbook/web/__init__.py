"""The workbook in the browser: ``./check.sh serve`` (a local app) and ``./check.sh site``
(a static export).  Both render from the same parsed chapters (``workbook.chapters``)."""
