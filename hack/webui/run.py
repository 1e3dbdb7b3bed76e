"""`make test-webui`: a real chat in Open WebUI, in headless Chromium, answered through llmaz-gateway.

Run by the Python of the test-webui venv (hack/webui/install.sh: open-webui and selenium, nothing of llmaz):

    python hack/webui/run.py [--gateway URL] [--out DIR] [--model NAME] [--message TEXT] [--standin PYTHON]

1. Asks the gateway (`--gateway`, default $WEBUI_GATEWAY_URL, else http://127.0.0.1:8000/v1, where `make run`
   serves) for its models, and fails in one line when nothing answers there. `--standin PYTHON` first starts
   `PYTHON -m llmaz_dev.testing.standin_gateway` (the real gateway over a scripted engine) on a free port and uses it.
2. Starts Open WebUI on 127.0.0.1 (a free port) with the gateway as its only connection: single-user (no login),
   no Ollama, offline (no model downloads, no update checks, no telemetry), no background title/tag/follow-up
   requests, replies capped at WEBUI_MAX_TOKENS (48), its data in DIR/data (new for every run), its log in
   DIR/open-webui.log.
3. Drives it in headless Chromium (Debian's chromium and chromium-driver): opens the UI, picks the model in the
   model selector, types the message, sends it, waits until the assistant's reply has text and the response has
   finished, and saves DIR/open-webui-chat.png (DIR/open-webui-failed.png when a step fails).

Every wait is bounded (WEBUI_START_TIMEOUT, default 180 s, for Open WebUI to start; WEBUI_STEP_TIMEOUT, default
60 s, for each page step; WEBUI_REPLY_TIMEOUT, default 300 s, for the reply) and polls; nothing sleeps to
synchronise. Exits 0 with the screenshot's path as the last line, else 1 with the failure as the last line.

Lint: `ruff` with the project's settings; mypy needs selenium, so `mypy --strict --python-executable
$LLMAZ_CACHE/webui/venv/bin/python hack/webui/run.py`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any, Literal, TypeVar

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException, WebDriverException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.wait import WebDriverWait

REPO = Path(__file__).resolve().parents[2]
DEFAULT_GATEWAY = "http://127.0.0.1:8000/v1"
DEFAULT_MESSAGE = "Hello! Which model are you?"
START_TIMEOUT = float(os.environ.get("WEBUI_START_TIMEOUT", "180"))
STEP_TIMEOUT = float(os.environ.get("WEBUI_STEP_TIMEOUT", "60"))
REPLY_TIMEOUT = float(os.environ.get("WEBUI_REPLY_TIMEOUT", "300"))
# Any key does while the gateway has no --api-keys-file; with one, WEBUI_API_KEY must be one of its keys.
API_KEY = os.environ.get("WEBUI_API_KEY") or "sk-llmaz-test-webui"
# Open WebUI's default for every model's replies: the tiny model's random text would otherwise run to the end of its
# context, past one screen.
MAX_TOKENS = int(os.environ.get("WEBUI_MAX_TOKENS", "48"))
POLL = 0.25
T = TypeVar("T")


class StepError(Exception):
    """A step that did not happen; its message is the one line printed."""


def say(message: str) -> None:
    print(f"[test-webui] {message}", file=sys.stderr, flush=True)


def poll(what: str, timeout: float, check: Callable[[], T | None]) -> T:
    """`check()` every POLL seconds until it returns something other than None; StepError after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise StepError(f"{what}: not after {timeout:.0f} s")
        time.sleep(POLL)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def get_json(url: str, timeout: float = 5.0, key: str | None = None) -> Any:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout) as resp:
        return json.load(resp)


def gateway_models(base: str) -> list[str]:
    """The model ids the gateway lists; StepError, in words a person can act on, when it does not answer."""
    url = f"{base}/models"
    try:
        listed = get_json(url, key=API_KEY)
    except urllib.error.HTTPError as e:
        if e.code in (401, 403):
            raise StepError(f"{url} answered HTTP {e.code}: set WEBUI_API_KEY to a key of its --api-keys-file") from e
        raise StepError(f"{url} answered HTTP {e.code}: WEBUI_GATEWAY_URL must be an OpenAI base URL (…/v1)") from e
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise StepError(
            f"nothing answers at {base} ({reason}): start `make run` first (it serves tiny-llama through "
            "llmaz-gateway there), or set WEBUI_GATEWAY_URL, or WEBUI_STANDIN=true"
        ) from e
    except ValueError as e:
        raise StepError(f"{url} did not answer JSON: WEBUI_GATEWAY_URL must be an OpenAI base URL (…/v1)") from e
    data = listed.get("data") if isinstance(listed, dict) else None
    if not isinstance(data, list):
        raise StepError(f"{url} answered no model list: WEBUI_GATEWAY_URL must be an OpenAI base URL (…/v1)")
    return [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m]


def stop(proc: subprocess.Popen[Any], name: str) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            say(f"{name} did not stop in 10 s: killing it")
            proc.kill()
            proc.wait(10)


@contextlib.contextmanager
def standin_gateway(python: str) -> Iterator[str]:
    """`python -m llmaz_dev.testing.standin_gateway` on a free port; yields its base URL."""
    proc = subprocess.Popen(
        [python, "-m", "llmaz_dev.testing.standin_gateway", "--port", "0"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], STEP_TIMEOUT)
        line = proc.stdout.readline().strip() if ready else ""
        if not line.startswith("http://"):
            raise StepError(f"{python} -m llmaz_dev.testing.standin_gateway printed no URL (exit {proc.poll()})")
        yield line
    finally:
        stop(proc, "the stand-in gateway")


@contextlib.contextmanager
def open_webui(gateway: str, out: Path) -> Iterator[str]:
    """Open WebUI on 127.0.0.1 with `gateway` as its one OpenAI connection; yields its URL once healthy."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    data = out / "data"
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    log_path = out / "open-webui.log"
    env = {
        **os.environ,
        "DATA_DIR": str(data),
        "WEBUI_SECRET_KEY": secrets.token_urlsafe(24),  # else it writes .webui_secret_key into its cwd
        "WEBUI_AUTH": "False",  # single user, no signup or login
        "ENABLE_OLLAMA_API": "False",
        "ENABLE_OPENAI_API": "True",
        "OPENAI_API_BASE_URL": gateway,
        "OPENAI_API_BASE_URLS": gateway,
        "OPENAI_API_KEY": API_KEY,
        "OPENAI_API_KEYS": API_KEY,
        "OFFLINE_MODE": "True",  # no model downloads, no version check
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "ENABLE_VERSION_UPDATE_CHECK": "False",
        "RAG_EMBEDDING_ENGINE": "openai",  # no local sentence-transformers model (not installed)
        "BYPASS_EMBEDDING_AND_RETRIEVAL": "True",
        "DEFAULT_MODEL_PARAMS": json.dumps({"max_tokens": MAX_TOKENS}),
        "ENABLE_TITLE_GENERATION": "False",  # one chat, one request to the model
        "ENABLE_TAGS_GENERATION": "False",
        "ENABLE_FOLLOW_UP_GENERATION": "False",
        "ENABLE_AUTOCOMPLETE_GENERATION": "False",
        "ANONYMIZED_TELEMETRY": "False",
        "DO_NOT_TRACK": "true",
        "SCARF_NO_ANALYTICS": "true",
        "CORS_ALLOW_ORIGIN": url,
    }
    exe = Path(sys.executable).parent / "open-webui"
    say(f"starting Open WebUI on {url} (log: {log_path})")
    started = time.monotonic()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [str(exe), "serve", "--host", "127.0.0.1", "--port", str(port)],
            cwd=out,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:

        def healthy() -> bool | None:
            if proc.poll() is not None:
                tail = log_path.read_text(errors="replace").splitlines()[-15:]
                print("\n".join(tail), file=sys.stderr)
                raise StepError(f"Open WebUI exited ({proc.returncode}) while starting: its log is {log_path}")
            with contextlib.suppress(OSError, ValueError):
                return True if get_json(f"{url}/health", timeout=2).get("status") else None
            return None

        poll(f"Open WebUI at {url}/health (log: {log_path})", START_TIMEOUT, healthy)
        say(f"Open WebUI is up in {time.monotonic() - started:.0f} s")
        yield url
    finally:
        stop(proc, "Open WebUI")


@contextlib.contextmanager
def chromium() -> Iterator[WebDriver]:
    browser = shutil.which("chromium")
    driver_path = shutil.which("chromedriver")
    if browser is None or driver_path is None:
        raise StepError("chromium or chromedriver not found: `make test-webui` installs them (hack/webui/packages.txt)")
    profile = tempfile.mkdtemp(prefix="llmaz-webui-chromium-")
    options = Options()
    options.binary_location = browser
    for arg in (
        "--headless=new",
        "--no-sandbox",  # root, and containers without user namespaces
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        "--window-size=1280,860",
        "--lang=en-US",  # the selectors below use Open WebUI's English labels
        f"--user-data-dir={profile}",
    ):
        options.add_argument(arg)
    options.add_experimental_option("prefs", {"intl.accept_languages": "en-US,en"})
    try:
        driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
        try:
            driver.set_page_load_timeout(STEP_TIMEOUT)
            driver.set_script_timeout(STEP_TIMEOUT)
            yield driver
        finally:
            with contextlib.suppress(Exception):  # chromedriver may be gone already (stopped with us)
                driver.quit()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def wait(driver: WebDriver, what: str, timeout: float, check: Callable[[WebDriver], T | Literal[False]]) -> T:
    try:
        return WebDriverWait(
            driver, timeout, poll_frequency=POLL, ignored_exceptions=(StaleElementReferenceException,)
        ).until(check)
    except TimeoutException as e:
        raise StepError(f"{what}: not after {timeout:.0f} s") from e


def shown(driver: WebDriver, selector: str, by: str = By.CSS_SELECTOR) -> WebElement | Literal[False]:
    """The first displayed element matching `selector`, else False."""
    return next((e for e in driver.find_elements(by, selector) if e.is_displayed()), False)


def enabled(driver: WebDriver, css: str) -> WebElement | Literal[False]:
    """The first displayed and enabled element matching `css`, else False."""
    element = shown(driver, css)
    return element if element and element.is_enabled() else False


def reply(driver: WebDriver) -> tuple[bool, str] | Literal[False]:
    """(True, text) once the last assistant message has text and no response is running; (False, text) when the
    message is an error notice instead of a reply; False while neither."""
    messages = driver.find_elements(By.CSS_SELECTOR, ".chat-assistant")
    if not messages or driver.find_elements(By.CSS_SELECTOR, "button[aria-label='Stop']"):
        return False
    last = messages[-1]
    text = " ".join(p.text for p in last.find_elements(By.CSS_SELECTOR, ".markdown-prose")).strip()
    if text:
        return True, text
    notice = last.text.strip()
    if notice:
        return False, notice
    # Finished (the message's actions are shown) with no text at all.
    message = last.find_element(By.XPATH, "./ancestor::div[starts-with(@id, 'message-')][1]")
    return (False, "an empty reply") if message.find_elements(By.CSS_SELECTOR, "button[aria-label='Copy']") else False


def chat(driver: WebDriver, url: str, model: str, message: str, screenshot: Path) -> str:
    """One chat in the UI at `url`: pick `model`, send `message`, wait for the reply; returns the reply's text."""
    say(f"opening {url} in headless Chromium")
    driver.get(url)
    wait(driver, "the chat input (#chat-input)", STEP_TIMEOUT, lambda d: shown(d, "#chat-input"))
    # An admin's first visit opens the release notes over the page: close them as a person would.
    notes = '//button[normalize-space()="Okay, Let\'s Go!"]'
    if button := shown(driver, notes, By.XPATH):
        say("closing the release notes")
        button.click()
        wait(driver, "the release notes to close", STEP_TIMEOUT, lambda d: not shown(d, notes, By.XPATH))

    say(f"selecting the model {model}")
    selector = wait(driver, "the model selector", STEP_TIMEOUT, lambda d: shown(d, "#model-selector-model-button"))
    selector.click()
    option = wait(
        driver,
        f"{model} in the model selector (Open WebUI lists the gateway's /v1/models)",
        STEP_TIMEOUT,
        lambda d: shown(d, f"button[role='option'][aria-label='Select {model} model']"),
    )
    option.click()
    wait(
        driver,
        f"the model selector to show {model}",
        STEP_TIMEOUT,
        lambda d: (
            d.find_element(By.ID, "model-selector-model-button").get_attribute("aria-label")
            == f"Selected model: {model}"
        ),
    )

    say(f"sending {message!r}")
    chat_input = wait(driver, "the chat input (#chat-input)", STEP_TIMEOUT, lambda d: shown(d, "#chat-input"))
    chat_input.click()
    chat_input.send_keys(message)
    wait(driver, "the send button", STEP_TIMEOUT, lambda d: enabled(d, "#send-message-button")).click()
    started = time.monotonic()
    ok, text = wait(driver, f"a reply from {model}", REPLY_TIMEOUT, reply)
    if not ok:
        raise StepError(f"Open WebUI shows an error instead of a reply from {model}: {text}")
    shown_text = text if len(text) <= 160 else text[:160] + "..."
    say(f"{model} replied in {time.monotonic() - started:.1f} s: {shown_text!r}")
    # The sent message is on the page too: the screenshot shows both.
    if message not in driver.find_element(By.TAG_NAME, "body").text:
        raise StepError(f"the sent message {message!r} is not on the page")
    # Notices ("You're now logged in.") would cover the conversation: close them as a person would.
    for close in driver.find_elements(By.CSS_SELECTOR, "[data-sonner-toast] button[aria-label='Close toast']"):
        with contextlib.suppress(WebDriverException):  # one that closed by itself meanwhile
            close.click()
    wait(driver, "the notices to close", STEP_TIMEOUT, lambda d: not shown(d, "[data-sonner-toast]"))
    driver.save_screenshot(str(screenshot))
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gateway", default=os.environ.get("WEBUI_GATEWAY_URL") or DEFAULT_GATEWAY)
    parser.add_argument("--out", type=Path, default=REPO / ".dev" / "webui", help="output dir (default .dev/webui)")
    parser.add_argument("--model", default=os.environ.get("WEBUI_MODEL", ""), help="default: the only/first listed")
    parser.add_argument("--message", default=os.environ.get("WEBUI_MESSAGE") or DEFAULT_MESSAGE)
    parser.add_argument("--standin", metavar="PYTHON", help="serve llmaz_dev.testing.standin_gateway with PYTHON")
    args = parser.parse_args(argv)

    def terminated(signum: int, frame: FrameType | None) -> None:
        raise StepError(f"stopped by {signal.Signals(signum).name}")

    signal.signal(signal.SIGTERM, terminated)  # `timeout` stops us: stop Open WebUI and Chromium on the way out
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    screenshot = out / "open-webui-chat.png"
    screenshot.unlink(missing_ok=True)
    (out / "open-webui-failed.png").unlink(missing_ok=True)
    started = time.monotonic()
    try:
        with contextlib.ExitStack() as stack:
            gateway = args.gateway.rstrip("/")
            if args.standin:
                gateway = stack.enter_context(standin_gateway(args.standin))
                say(f"serving the stand-in gateway (llmaz_dev.testing.standin_gateway) at {gateway}")
            models = gateway_models(gateway)
            if not models:
                raise StepError(f"{gateway}/models lists no model yet: wait until `make run` prints `via gateway`")
            model = args.model or ("tiny-llama" if "tiny-llama" in models else models[0])
            if model not in models:
                raise StepError(f"{gateway}/models does not list {model} (it lists {', '.join(models)})")
            say(f"gateway {gateway} lists {', '.join(models)}: chatting with {model}")
            url = stack.enter_context(open_webui(gateway, out))
            driver = stack.enter_context(chromium())
            try:
                chat(driver, url, model, args.message, screenshot)
            except (StepError, WebDriverException):
                # Best effort: the browser may be gone too (Ctrl-C reaches it as well).
                with contextlib.suppress(Exception):
                    driver.save_screenshot(str(out / "open-webui-failed.png"))
                    say(f"the page as it was: {out / 'open-webui-failed.png'}")
                raise
    except StepError as e:
        print(f"make test-webui: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("make test-webui: interrupted", file=sys.stderr)
        return 130
    except WebDriverException as e:
        print(f"make test-webui: the browser failed: {e.msg or e}".splitlines()[0], file=sys.stderr)
        return 1
    say(f"passed in {time.monotonic() - started:.0f} s; the screenshot:")
    print(screenshot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
