"""moto's S3 server, with its conditional writes decided atomically as Amazon S3 decides them.

Run as ``python tests/motoserver.py -H HOST -p PORT`` (moto's own server and flags:
``python -m moto.server``). moto 5 answers requests on several threads, and it checks a
create-only write (``If-None-Match: *``, also on ``CompleteMultipartUpload``) and then stores the
object in two steps: two conditional PUTs of one key that arrive together can both pass the
check, and both get 200. Seen on a loaded machine in the store conformance race
(``put_if_absent`` returned True to two of three contenders, the key holding the second one's
bytes). Amazon S3 decides a conditional write atomically (one succeeds, the others get 412), and
silt's commit protocol relies on exactly that, so the emulator's gap would make the tests fail
for a reason that is not silt's. This launcher serializes moto's handling of every PUT or POST
on an object that carries ``If-None-Match`` or ``If-Match`` behind one lock; unconditional
requests run concurrently as before.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from moto.s3.responses import S3Response
from moto.server import main

_CONDITIONAL = threading.Lock()


def _atomic_when_conditional(handler: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(handler)
    def handle(self: S3Response, *args: Any, **kwargs: Any) -> Any:
        if self.headers.get("If-None-Match") or self.headers.get("If-Match"):
            with _CONDITIONAL:
                return handler(self, *args, **kwargs)
        return handler(self, *args, **kwargs)

    return handle


S3Response._key_response_put = _atomic_when_conditional(S3Response._key_response_put)
S3Response._key_response_post = _atomic_when_conditional(S3Response._key_response_post)

if __name__ == "__main__":
    main()
