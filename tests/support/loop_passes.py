"""Counting passes of an asyncio loop: how soon a woken task runs."""

from __future__ import annotations

import asyncio


async def passes_until_done(task: asyncio.Future, most: int = 5) -> int:
    """The passes of the loop (``asyncio.sleep(0)`` each) until ``task`` is done; ``most`` + 1
    when it is not done after ``most``. A task woken by the last step run on the loop has run
    within the first."""
    for n in range(1, most + 1):
        await asyncio.sleep(0)
        if task.done():
            return n
    return most + 1
