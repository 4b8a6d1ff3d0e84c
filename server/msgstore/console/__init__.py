"""The web console (issue 34): ``msgstore console`` serves pages over a store's public API.

It is a client of the store like any other, in a process of its own: it signs in to the store
as the person using it (their access key and secret key), so every page shows only what that
user may read and every action is refused as the store would refuse that user. It runs beside
the store (a Deployment on Kubernetes, ``msgstore console`` on a laptop) so that opening it
costs the store nothing beyond the calls its pages make, and a store's roll never takes it down.

aiohttp serves it (already the operator's web stack through Kopf, asyncio like our clients),
Jinja2 renders the pages (autoescaped), uPlot draws the plots in the browser (vendored under
static/, MIT).
"""
