"""The Temporal Web UI, in real headless Chromium, shows an encrypted run's payloads decrypted by the
codec server only after the person authenticated (issue #18, docs/security.md "Web UI").

A dev server with its Web UI and ``--ui-codec-endpoint`` pointing at our codec server; a run whose
payloads are encrypted; the console (same token) that sets the session cookie. The person ticks the
Web UI's codec setting "Include cross-origin credentials" (what the UI's Codec Server dialog stores
in the page's localStorage), so the UI's ``POST /decode`` carries the console's cookie.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path

import aiohttp
from temporalio.client import Client

from tests.support.encryption import FIXTURE_KEYS
from tests.support.harness import CHROMIUM, CHROMIUM_ARGS, Harness
from tests.support.mcp import free_port, stop
from workers.config import Settings
from workers.console.auth import Authenticator
from workers.console.serve import start_server
from workers.local.dev_server import dev_server_args
from workers.payloads.codec_server import default_allowed_origins, start_codec_server
from workers.payloads.converter import build_data_converter
from workers.testing.env import dev_config
from workers.testing.scripted_model import ScriptedModel, text

TOKEN = "webui-codec-test-token"
MARKER = "PANGOLIN-INPUT-5521"

# What the Web UI's Codec Server dialog stores when the person ticks "use my browser setting" and
# "include cross-origin credentials" (temporalio/ui src/lib/stores/data-encoder-config.ts).
UI_CODEC_SETTINGS = """([endpoint]) => {
  localStorage.setItem("endpoint", JSON.stringify(endpoint));
  localStorage.setItem("overrideRemoteCodecConfiguration", "true");
  localStorage.setItem("includeCredentials", "true");
}"""


async def _wait_http(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    async with aiohttp.ClientSession() as http:
        while True:
            try:
                async with http.get(url) as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            assert proc.poll() is None, "the dev server exited"
            assert time.monotonic() < deadline, f"{url} did not answer"
            await asyncio.sleep(0.2)


def _note_decode(response, into: list[int]) -> None:
    """Record the status of the Web UI's ``POST .../decode`` calls (not their CORS preflights)."""
    if "/decode" in response.url and response.request.method == "POST":
        into.append(response.status)


async def _page_text(page, url: str, want: str, seconds: float = 20) -> str:
    """The page's text once ``want`` shows (or after ``seconds``), reloading until then."""
    await page.goto(url)
    deadline = time.monotonic() + seconds
    body = ""
    while time.monotonic() < deadline:
        body = await page.inner_text("body")
        if want in body:
            return body
        await asyncio.sleep(0.5)
    return body


async def test_web_ui_shows_decrypted_payloads_only_after_authenticating(tmp_path: Path):
    from playwright.async_api import async_playwright

    settings = Settings(payload_dir=str(tmp_path / "payloads"), encryption_keys=FIXTURE_KEYS)
    ui_port = free_port()
    ui = f"http://127.0.0.1:{ui_port}"
    auth = Authenticator(token=TOKEN)
    codec = await start_codec_server(
        settings, port=0, allowed_origins=default_allowed_origins(ui), auth=auth
    )
    cfg = dev_config().model_copy(
        update={
            "port": free_port(),
            "ui_port": ui_port,
            "db_filename": None,
            "log_level": "error",
            "ui_codec_endpoint": codec.url,
        }
    )
    proc = subprocess.Popen(
        dev_server_args(cfg, tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    runner = None
    try:
        await _wait_http(f"{ui}/api/v1/settings", proc)
        enc = await Client.connect(
            cfg.address, namespace="default", data_converter=build_data_converter(settings)
        )
        async with Harness(enc, tmp_path, ScriptedModel([text("the answer is 42")])) as h:
            handle = await h.start(f"Say the answer. {MARKER}")
            result = await handle.result()
        assert result.status == "completed"
        raw = (await handle.fetch_history()).to_json()
        assert MARKER not in raw  # at rest: ciphertext only
        desc = await handle.describe()
        page_url = f"{ui}/namespaces/default/workflows/{handle.id}/{desc.run_id}/history"
        runner, console = await start_server(
            enc, "127.0.0.1", 0, lambda r: f"{ui}/{r}", h.task_queue, auth
        )
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                # 1. Not signed in: the UI asks the codec server, which refuses; no plaintext.
                anon = await browser.new_page()
                anon_status: list[int] = []
                anon.on("response", lambda r: _note_decode(r, anon_status))
                await anon.goto(f"{ui}/")
                await anon.evaluate(UI_CODEC_SETTINGS, [codec.url])
                seen = await _page_text(anon, page_url, MARKER, seconds=8)
                assert MARKER not in seen
                assert handle.id in seen  # the page itself did load
                assert anon_status and set(anon_status) <= {401}, anon_status
                await anon.close()

                # 2. Signed in through the console's URL with its token: the cookie goes with the
                #    UI's /decode request and the input shows decrypted.
                ctx = await browser.new_context()
                page = await ctx.new_page()
                await page.goto(f"{console}/?token={TOKEN}")
                assert page.url == f"{console}/"
                await page.goto(f"{ui}/")
                await page.evaluate(UI_CODEC_SETTINGS, [codec.url])
                decode_status: list[int] = []
                page.on("response", lambda r: _note_decode(r, decode_status))
                seen = await _page_text(page, page_url, MARKER)
                assert MARKER in seen, seen[:2000]
                assert decode_status and set(decode_status) == {200}, decode_status
                await ctx.close()
            finally:
                await browser.close()
    finally:
        if runner is not None:
            await runner.cleanup()
        await codec.stop()
        stop(proc)
