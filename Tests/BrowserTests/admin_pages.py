#!/usr/bin/env python3
"""Drives headless Chromium through Rouse's admin pages, one step at a time, for
Tests/RouseServerTests/AdminPagesBrowserTests.swift.

The test starts this script and writes one JSON object per line on its standard input, e.g.
{"step": "sign_in", "name": "ops", "password": "..."}; the script answers each with one JSON line on
standard output: {"ok": true, ...what the step read...} or {"ok": false, "error": "..."}. The test
does the SIP side (registering a phone, placing a call) between steps. Every step waits for what it
expects with a deadline (--step-timeout), never for a fixed time, and saves a screenshot of the page
it ends on into --artifacts (a failed step saves its screenshot and the page's HTML too).

Only loopback is reached: the base URL is 127.0.0.1, Chromium's background services are switched
off and every host name resolves to nothing. The browser and its driver are Debian's (chromium,
chromium-driver); Selenium never downloads one.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import traceback

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import Select, WebDriverWait


class StepFailed(Exception):
    """A step did not find what it expected in time."""


class AdminPagesRobot:
    """One Chromium session on the admin pages, and the steps the test can ask for."""

    def __init__(self, base_url, artifacts, chromium, chromedriver, step_timeout, desktop=(1280, 900)):
        self.base_url = base_url.rstrip("/")
        self.artifacts = artifacts
        self.step_timeout = step_timeout
        self.desktop = desktop
        self.shots = 0
        os.makedirs(artifacts, exist_ok=True)
        self.profile = tempfile.mkdtemp(prefix="rouse-chromium-")
        options = webdriver.ChromeOptions()
        options.binary_location = chromium
        for argument in [
            "--headless=new",
            "--no-sandbox",  # the tests run as root
            "--disable-gpu",
            "--disable-dev-shm-usage",
            f"--window-size={desktop[0]},{desktop[1]}",
            f"--user-data-dir={self.profile}",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-default-apps",
            "--disable-domain-reliability",
            "--disable-client-side-phishing-detection",
            "--metrics-recording-only",
            "--disable-features=Translate,OptimizationHints,MediaRouter,AutofillServerCommunication",
            "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
            "--password-store=basic",
        ]:
            options.add_argument(argument)
        service = Service(executable_path=chromedriver, log_output=os.path.join(artifacts, "chromedriver.log"))
        self.driver = webdriver.Chrome(service=service, options=options)
        self.driver.set_page_load_timeout(step_timeout)

    def close(self):
        try:
            self.driver.quit()
        finally:
            shutil.rmtree(self.profile, ignore_errors=True)

    # -- waiting -----------------------------------------------------------------------------

    def wait(self):
        return WebDriverWait(self.driver, self.step_timeout, poll_frequency=0.1)

    def element(self, css):
        """The element `css` selects, once it is on the page."""
        try:
            return self.wait().until(EC.presence_of_element_located((By.CSS_SELECTOR, css)))
        except TimeoutException:
            raise StepFailed(f"no {css} on {self.driver.current_url} within {self.step_timeout} s")

    @staticmethod
    def renumbered(error):
        """Whether `error` only says an element looked up a moment ago is gone: the page was
        replaced, or Chromium renumbered its nodes ("Node with given id does not belong to the
        document", seen after a resize). Looking the element up again is then the answer."""
        if isinstance(error, TimeoutException):
            return False
        return isinstance(error, StaleElementReferenceException) or "does not belong to the document" in str(error)

    def wait_for(self, look):
        """Waits (the step's deadline) until `look(driver)` gives a value; an element gone stale or
        renumbered while `look` reads it counts as not yet."""
        def attempt(driver):
            try:
                return look(driver)
            except (StaleElementReferenceException, WebDriverException) as error:
                if not self.renumbered(error):
                    raise
                return False
        return self.wait().until(attempt)

    def text_of(self, css, *expected):
        """The text of `css` once it holds every one of `expected`."""
        def holds(driver):
            found = driver.find_elements(By.CSS_SELECTOR, css)
            if found and all(piece in found[0].text for piece in expected):
                return found[0].text
            return False
        try:
            return self.wait_for(holds)
        except TimeoutException:
            found = self.driver.find_elements(By.CSS_SELECTOR, css)
            shown = found[0].text if found else "(no such element)"
            raise StepFailed(f"{css} on {self.driver.current_url} did not show {expected} within {self.step_timeout} s: {shown!r}")

    def submit(self, button_css):
        """Clicks a form's button and waits for the page it leads to."""
        deadline = time.monotonic() + self.step_timeout
        while True:
            page = self.driver.find_element(By.TAG_NAME, "html")
            try:
                self.driver.find_element(By.CSS_SELECTOR, button_css).click()
                break
            except (StaleElementReferenceException, WebDriverException) as error:
                # A click refused because the nodes were renumbered never reached the page.
                if not self.renumbered(error):
                    raise
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        def replaced(driver):
            # Selenium's staleness_of lets Chromium's "does not belong to the document" escape.
            try:
                page.is_enabled()
                return False
            except (StaleElementReferenceException, WebDriverException) as error:
                if not self.renumbered(error):
                    raise
                return True
        try:
            self.wait().until(replaced)
        except TimeoutException:
            raise StepFailed(f"{button_css} led nowhere within {self.step_timeout} s")
        self.element("body")

    def open(self, path):
        self.driver.get(self.base_url + path)
        self.element("body")

    def type_into(self, css, text):
        """Types `text` into the field `css`, looking the field up again when Chromium has
        renumbered the page's nodes meanwhile (after a resize it may answer "Node with given id does
        not belong to the document"), until the field holds the text or the step's deadline passes."""
        deadline = time.monotonic() + self.step_timeout
        while True:
            try:
                field = self.element(css)
                field.clear()
                field.send_keys(text)
                if field.get_attribute("value") == text:
                    return
            except (StaleElementReferenceException, WebDriverException) as error:
                if isinstance(error, TimeoutException) or time.monotonic() > deadline:
                    raise
            if time.monotonic() > deadline:
                raise StepFailed(f"{css} on {self.driver.current_url} would not take the text within {self.step_timeout} s")
            time.sleep(0.05)

    def screenshot(self, name):
        """The whole page (the window grown to its height) as <artifacts>/NN-name.png."""
        self.shots += 1
        width = self.driver.get_window_size()["width"]
        height = self.driver.execute_script("return Math.max(document.body.scrollHeight, document.documentElement.scrollHeight)")
        self.driver.set_window_size(width, max(600, min(int(height) + 120, 6000)))
        path = os.path.join(self.artifacts, f"{self.shots:02d}-{name}.png")
        self.driver.save_screenshot(path)
        return path

    # -- steps -------------------------------------------------------------------------------

    def step_open_root(self, _):
        """/ leads to the sign-in form."""
        self.open("/")
        self.element("form[action='/admin/sign-in'] #password")
        return {"url": self.driver.current_url, "shot": self.screenshot("sign-in")}

    def step_sign_in(self, args):
        self.type_into("#name", args["name"])
        self.type_into("#password", args["password"])
        self.submit("#sign-in")
        heading = self.text_of("h1", "Organisations and extensions")
        return {"url": self.driver.current_url, "heading": heading, "shot": self.screenshot("signed-in")}

    def step_add_extension(self, args):
        self.open("/admin/extensions")
        self.type_into("#new-address", args["address"])
        self.type_into("#new-password", args["password"])
        self.submit("#add-extension-button")
        notice = self.text_of("#notice", args["address"])
        listed = self.text_of("#extension-list", args["address"])
        return {"notice": notice, "list": listed, "shot": self.screenshot("extension-added")}

    def step_extension_devices(self, args):
        """The extension's page once its Devices show every text of `expect`."""
        self.open("/admin/extensions/" + args["address"])
        devices = self.text_of("#devices", *args.get("expect", []))
        posted = self.text_of("#posted-tokens")
        result = {"devices": devices, "posted": posted, "shot": self.screenshot("extension-devices")}
        if args.get("phone"):
            # The same page on a phone-sized screen.
            self.driver.set_window_size(390, 844)
            self.open("/admin/extensions/" + args["address"])
            self.text_of("#devices", *args.get("expect", []))
            result["phone_shot"] = self.screenshot("extension-devices-phone")
            self.driver.set_window_size(*self.desktop)
        return result

    def step_extension_pushes(self, args):
        """The extension's Recent pushes and Recent calls once they show `expect_pushes` and `expect_calls`."""
        self.open("/admin/extensions/" + args["address"])
        pushes = self.text_of("#recent-pushes", *args.get("expect_pushes", []))
        calls = self.text_of("#recent-calls", *args.get("expect_calls", []))
        return {"pushes": pushes, "calls": calls, "shot": self.screenshot("recent-pushes")}

    def step_open_journey(self, args):
        """Follows the first Journey link of the extension's Recent calls."""
        self.element("#recent-calls a.journey-link")
        self.submit("#recent-calls a.journey-link")
        summary = self.text_of("#call-summary")
        journey = self.text_of("#journey", *args.get("expect", []))
        return {"url": self.driver.current_url, "summary": summary, "journey": journey, "shot": self.screenshot("journey")}

    def step_test_push(self, args):
        """Settings → Mobile push: pastes `token` into the first `kind` app's Test form and sends it."""
        self.open("/admin/extensions")
        self.element("#nav-push").click()
        self.text_of("h1", "Mobile push")
        card = self.element(f"#{args['kind']}-apps article.card")
        app_id = card.get_attribute("id").removeprefix("push-app-")
        self.type_into(f"#token-{app_id}", args["token"])
        if args.get("provider"):
            Select(self.element(f"#provider-{app_id}")).select_by_value(args["provider"])
        self.submit(f"#test-button-{app_id}")
        answer = self.text_of(f"#test-result-{app_id}", *args.get("expect", []))
        return {"app": app_id, "answer": answer, "shot": self.screenshot(args.get("shot", "test-push"))}

    def device_id(self, address, user_agent):
        """The id of the device on `address`'s page whose box names `user_agent`."""
        self.open("/admin/extensions/" + address)
        self.text_of("#devices", user_agent)

        def device_named(driver):
            for device in driver.find_elements(By.CSS_SELECTOR, "#devices div.device"):
                if user_agent in device.text:
                    return device.get_attribute("id").removeprefix("device-")
            return False
        try:
            return self.wait_for(device_named)
        except TimeoutException:
            raise StepFailed(f"no device of {address} shows {user_agent!r} within {self.step_timeout} s")

    def step_test_device(self, args):
        """Presses Test push on the device of `address` that shows `user_agent`; the answer beside it."""
        device = self.device_id(args["address"], args["user_agent"])
        self.submit(f"#test-device-{device}")
        answer = self.text_of(f"#device-result-{device}", *args.get("expect", []))
        pushes = self.text_of("#recent-pushes", *args.get("expect_pushes", []))
        return {"device": device, "answer": answer, "pushes": pushes, "shot": self.screenshot(args.get("shot", "test-device"))}

    def step_show_token(self, args):
        """Presses Show token on the device of `address` that shows `user_agent`; the whole tokens shown."""
        device = self.device_id(args["address"], args["user_agent"])
        self.submit(f"#show-token-{device}")
        self.text_of("h1", "Token of")
        boxes = self.driver.find_elements(By.CSS_SELECTOR, "#whole-tokens textarea.whole-token")
        tokens = [box.get_attribute("value") for box in boxes]
        readonly = all(box.get_attribute("readonly") is not None for box in boxes)
        shot = self.screenshot("show-token")
        self.submit("#back-to-extension")
        self.text_of("#devices", args["user_agent"])
        return {"device": device, "tokens": tokens, "readonly": readonly, "shot": shot}

    def step_add_route(self, args):
        """From the organisation list to `organisation`'s page; fills Add a route and adds it. The
        notice and the route's row once it shows every text of `expect`."""
        self.open("/admin/extensions")
        self.submit(f"[id='organisation-page-{args['organisation']}']")
        self.text_of("h1", args["organisation"])
        for name, css in [("name", "#route-name"), ("pattern", "#route-pattern"), ("hops", "#route-hops"),
                          ("caller_identity", "#route-caller-identity"), ("username", "#route-username"), ("password", "#route-password")]:
            if args.get(name):
                self.type_into(css, args[name])
        if args.get("emergency"):
            self.element("#route-emergency").click()
        self.submit("#add-route-button")
        notice = self.text_of("#notice", args["name"])
        row = self.text_of(f"[id='route-{args['name']}']", *args.get("expect", []))
        return {"url": self.driver.current_url, "notice": notice, "row": row, "shot": self.screenshot("route-added")}

    def step_remove_route(self, args):
        """Presses Remove beside route `name` on `organisation`'s page; the notice and the routes left."""
        self.open("/admin/organisations/" + args["organisation"])
        self.submit(f"[id='remove-route-{args['name']}']")
        notice = self.text_of("#notice", args["name"], "removed")
        routes = self.text_of("#routes")
        gone = not self.driver.find_elements(By.CSS_SELECTOR, f"[id='route-{args['name']}']")
        return {"notice": notice, "routes": routes, "gone": gone, "shot": self.screenshot("route-removed")}

    def step_sign_out(self, _):
        self.submit("#sign-out")
        notice = self.text_of("#notice", "You have signed out.")
        self.open("/admin/extensions")
        self.element("form[action='/admin/sign-in'] #password")
        return {"notice": notice, "url_after": self.driver.current_url, "shot": self.screenshot("signed-out")}

    def run(self, command):
        step = command.get("step", "")
        handler = getattr(self, "step_" + step, None)
        if handler is None:
            return {"ok": False, "error": f"no step {step!r}"}
        try:
            result = handler(command)
            result["ok"] = True
            return result
        except (StepFailed, WebDriverException, KeyError) as failure:
            self.save_failure(step)
            return {"ok": False, "error": f"{type(failure).__name__}: {failure}"}

    def save_failure(self, step):
        try:
            self.driver.save_screenshot(os.path.join(self.artifacts, f"failed-{step}.png"))
            with open(os.path.join(self.artifacts, f"failed-{step}.html"), "w", encoding="utf-8") as page:
                page.write(self.driver.page_source)
        except WebDriverException:
            traceback.print_exc(file=sys.stderr)


def reply(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", required=True, help="where Rouse serves HTTP, http://127.0.0.1:PORT")
    parser.add_argument("--artifacts", required=True, help="folder for the screenshots")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--chromedriver", default="/usr/bin/chromedriver")
    parser.add_argument("--step-timeout", type=float, default=60.0, help="seconds a step may wait for what it expects")
    arguments = parser.parse_args()
    if not arguments.base_url.startswith(("http://127.0.0.1:", "http://[::1]:")):
        reply({"ok": False, "error": "the base URL must be on loopback"})
        return 2
    os.environ.setdefault("SE_OFFLINE", "true")
    os.environ.setdefault("SE_AVOID_STATS", "true")
    try:
        robot = AdminPagesRobot(arguments.base_url, arguments.artifacts, arguments.chromium, arguments.chromedriver, arguments.step_timeout)
    except WebDriverException as failure:
        reply({"ok": False, "error": f"cannot start Chromium: {failure}"})
        return 1
    try:
        reply({"ok": True, "ready": True})
        for line in sys.stdin:
            if not line.strip():
                continue
            command = json.loads(line)
            if command.get("step") == "quit":
                break
            reply(robot.run(command))
    finally:
        robot.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
