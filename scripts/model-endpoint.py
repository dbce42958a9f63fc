#!/usr/bin/env python3
"""A scripted Anthropic Messages API endpoint, on loopback only.

It stands in for the model (never for the agent CLI): the real Claude Code
CLI, pointed at it with ANTHROPIC_BASE_URL, runs whole turns against it and
executes the tool calls it is told to make itself, under whatever confines
it. Used by the demo (scripts/demo.sh) and the tests (tests/real_cli.rs).

Scripts. A script is a JSON file holding a list of steps, played one per
model request of a conversation:

    [{"tool": "Bash", "input": {"command": "make test"}},
     {"tool": "Read", "input": {"file_path": "{cwd}/bench/run.sh"}},
     {"text": "done"}]

A step with "tool" answers with one tool_use block (stop_reason tool_use),
optionally preceded by a text block when "text" is given too; a step with
only "text" answers with that text and ends the turn (end_turn). In string
values of "input", "{cwd}" stands for the working directory the CLI names
in its prompt ("Primary working directory: ..."), so a script can
name files by absolute path in a worktree it does not know in advance.
The step is chosen by counting the tool_result blocks in the request's
messages: the first request of a turn plays step 0, the request carrying
the first tool result plays step 1, and so on. Past the last step the
endpoint ends the turn with the text "done". No state is kept between
requests, so several CLIs may talk to one endpoint at once.

Choosing a script. Each --script MATCH=FILE is tried in the order given;
the first whose MATCH occurs in the request body (its raw JSON text, so
keep MATCH free of quotes and backslashes) is played. A --script FILE
without MATCH= is the fallback. MATCH is typically a word of the prompt or
a path in the system prompt (the candidate's worktree). A request that
offers tools but matches no script is answered with HTTP 400 and an
Anthropic-style error naming the cause, so the CLI fails loudly.

Auxiliary requests are answered harmlessly: a Messages request that offers
no tools (title, topic or quota requests) gets the text "ok";
/v1/messages/count_tokens gets a token estimate; any GET or HEAD gets 200
and "{}"; any other POST gets 404 in the API's error shape.

Every request is appended to --log as one JSON line: time, method, path,
the script and step played, and the body (parsed JSON, else text).
Request bodies above --max-body bytes are refused (413) and not read.

    scripts/model-endpoint.py --port 0 --port-file PORTFILE \\
        --script cand-1=honest.json --script cand-2=cheat.json --log requests.jsonl
    ANTHROPIC_BASE_URL=http://127.0.0.1:$(cat PORTFILE) ANTHROPIC_API_KEY=x \\
        claude --dangerously-skip-permissions -p 'cand-1: make it faster'

Python 3 standard library only. Exits 2 on a bad argument (a non-loopback
address included).
"""

import argparse
import ipaddress
import json
import os
import re
import socket
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DEFAULT_MAX_BODY = 16 * 1024 * 1024
CWD_RE = re.compile(r"(?:Primary working directory|Working directory): *([^\n]+)")


class Script:
    """One candidate's steps and the string that selects them."""

    def __init__(self, match, path):
        self.match = match
        self.path = path
        self.name = os.path.basename(path)
        with open(path, encoding="utf-8") as f:
            steps = json.load(f)
        if not isinstance(steps, list):
            raise ValueError(f"{path}: a script is a JSON list of steps")
        for i, step in enumerate(steps):
            if not isinstance(step, dict) or not ("tool" in step or "text" in step):
                raise ValueError(f"{path}: step {i} needs \"tool\" or \"text\"")
            unknown = set(step) - {"tool", "input", "text"}
            if unknown:
                raise ValueError(f"{path}: step {i} has unknown keys {sorted(unknown)}")
            if "tool" in step and not isinstance(step.get("input", {}), dict):
                raise ValueError(f"{path}: step {i}: \"input\" must be an object")
        self.steps = steps


def count_tool_results(body):
    n = 0
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            n += sum(1 for b in content if isinstance(b, dict) and b.get("type") == "tool_result")
    return n


def substitute(value, cwd):
    if isinstance(value, str):
        return value.replace("{cwd}", cwd) if cwd is not None else value
    if isinstance(value, list):
        return [substitute(v, cwd) for v in value]
    if isinstance(value, dict):
        return {k: substitute(v, cwd) for k, v in value.items()}
    return value


def texts(value):
    """Every string inside a decoded JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for v in value:
            yield from texts(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from texts(v)


def working_directory(body):
    """The working directory the CLI names in its prompt (its environment
    section sits in "system" or in a message), if any."""
    for text in texts([body.get("system"), body.get("messages")]):
        m = CWD_RE.search(text)
        if m:
            return m.group(1).strip()
    return None


def estimate_tokens(raw):
    return max(1, len(raw) // 4)


class Endpoint(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, scripts, fallback, log_path, max_body):
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.address_family = family
        super().__init__(address, Handler)
        self.scripts = scripts
        self.fallback = fallback
        self.max_body = max_body
        self.log_lock = threading.Lock()
        self.log_file = open(log_path, "a", encoding="utf-8") if log_path else None

    def log_request_body(self, entry):
        if self.log_file is None:
            return
        line = json.dumps(entry, separators=(",", ":")) + "\n"
        with self.log_lock:
            self.log_file.write(line)
            self.log_file.flush()

    def choose(self, raw):
        for s in self.scripts:
            if s.match in raw:
                return s
        return self.fallback


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "vibesys-model-endpoint"

    def log_message(self, fmt, *args):  # quiet: --log records requests
        pass

    # --- plumbing ---------------------------------------------------------

    def read_body(self):
        """The request body, or None after answering 413/400."""
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            data = bytearray()
            while True:
                line = self.rfile.readline(64)
                try:
                    size = int(line.split(b";")[0].strip(), 16)
                except ValueError:
                    self.error(400, "invalid_request_error", "bad chunk size")
                    return None
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(data)
                if len(data) + size > self.server.max_body:
                    self.error(413, "request_too_large", "request body too large")
                    self.close_connection = True
                    return None
                data += self.rfile.read(size)
                self.rfile.readline(8)
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self.error(400, "invalid_request_error", "bad Content-Length")
            return None
        if length < 0 or length > self.server.max_body:
            self.error(413, "request_too_large", "request body too large")
            self.close_connection = True
            return None
        return self.rfile.read(length) if length else b""

    def send_json(self, status, obj):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", "req_" + uuid.uuid4().hex[:24])
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def error(self, status, kind, message):
        self.send_json(status, {"type": "error", "error": {"type": kind, "message": message}})

    def path_only(self):
        return self.path.split("?", 1)[0]

    # --- methods ----------------------------------------------------------

    def do_HEAD(self):
        self.server.log_request_body({"time": time.time(), "method": "HEAD", "path": self.path})
        self.send_json(200, {})

    def do_GET(self):
        self.server.log_request_body({"time": time.time(), "method": "GET", "path": self.path})
        self.send_json(200, {})

    def do_POST(self):
        raw_bytes = self.read_body()
        if raw_bytes is None:
            return
        raw = raw_bytes.decode("utf-8", errors="replace")
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = None
        entry = {"time": time.time(), "method": "POST", "path": self.path,
                 "body": body if body is not None else raw}
        path = self.path_only()
        if path.endswith("/v1/messages/count_tokens"):
            self.server.log_request_body(entry)
            self.send_json(200, {"input_tokens": estimate_tokens(raw)})
            return
        if not path.endswith("/v1/messages"):
            self.server.log_request_body(entry)
            self.error(404, "not_found_error", f"model-endpoint: no {path} here")
            return
        if not isinstance(body, dict):
            self.server.log_request_body(entry)
            self.error(400, "invalid_request_error", "model-endpoint: the body is not a JSON object")
            return
        model = body.get("model") or "scripted"
        if not body.get("tools"):
            entry["answer"] = "auxiliary"
            self.server.log_request_body(entry)
            self.answer(body, model, [{"type": "text", "text": "ok"}], "end_turn", raw)
            return
        script = self.server.choose(raw)
        if script is None:
            entry["answer"] = "no script"
            self.server.log_request_body(entry)
            self.error(400, "invalid_request_error",
                       "model-endpoint: no --script matches this request")
            return
        step_no = count_tool_results(body)
        entry["script"] = script.name
        entry["step"] = step_no
        self.server.log_request_body(entry)
        if step_no >= len(script.steps):
            blocks, stop = [{"type": "text", "text": "done"}], "end_turn"
        else:
            step = script.steps[step_no]
            blocks = []
            if "text" in step:
                blocks.append({"type": "text", "text": str(step["text"])})
            if "tool" in step:
                cwd = working_directory(body)
                blocks.append({"type": "tool_use", "id": f"toolu_vs{step_no:03d}{uuid.uuid4().hex[:16]}",
                               "name": step["tool"], "input": substitute(step.get("input", {}), cwd)})
                stop = "tool_use"
            else:
                stop = "end_turn"
        self.answer(body, model, blocks, stop, raw)

    # --- answers ----------------------------------------------------------

    def answer(self, body, model, blocks, stop, raw):
        msg_id = "msg_vs" + uuid.uuid4().hex[:20]
        usage_in = estimate_tokens(raw)
        usage_out = max(1, sum(len(json.dumps(b)) for b in blocks) // 4)
        if not body.get("stream"):
            self.send_json(200, {
                "id": msg_id, "type": "message", "role": "assistant", "model": model,
                "content": blocks, "stop_reason": stop, "stop_sequence": None,
                "usage": {"input_tokens": usage_in, "output_tokens": usage_out},
            })
            return
        events = [("message_start", {"type": "message_start", "message": {
            "id": msg_id, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": usage_in, "output_tokens": 1}}})]
        for i, b in enumerate(blocks):
            if b["type"] == "text":
                events.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                       "content_block": {"type": "text", "text": ""}}))
                events.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                                       "delta": {"type": "text_delta", "text": b["text"]}}))
            else:
                events.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                       "content_block": {"type": "tool_use", "id": b["id"],
                                                                         "name": b["name"], "input": {}}}))
                events.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                                       "delta": {"type": "input_json_delta",
                                                                 "partial_json": json.dumps(b["input"])}}))
            events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
        events.append(("message_delta", {"type": "message_delta",
                                         "delta": {"stop_reason": stop, "stop_sequence": None},
                                         "usage": {"output_tokens": usage_out}}))
        events.append(("message_stop", {"type": "message_stop"}))
        data = "".join(f"event: {name}\ndata: {json.dumps(obj)}\n\n" for name, obj in events).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", "req_" + uuid.uuid4().hex[:24])
        self.end_headers()
        self.wfile.write(data)


def loopback(host):
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="model-endpoint.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1",
                    help="loopback address to listen on (127.0.0.0/8 or ::1; anything else is refused)")
    ap.add_argument("--port", type=int, default=0, help="port (0: any free port; see --port-file)")
    ap.add_argument("--port-file", help="write the port listened on here (atomically) once listening")
    ap.add_argument("--script", action="append", default=[], metavar="[MATCH=]FILE",
                    help="a script, chosen when MATCH occurs in the request body; without MATCH= the fallback")
    ap.add_argument("--log", help="append every request as one JSON line to this file")
    ap.add_argument("--max-body", type=int, default=DEFAULT_MAX_BODY,
                    help=f"largest request body accepted, in bytes (default {DEFAULT_MAX_BODY})")
    args = ap.parse_args(argv)

    if not loopback(args.host):
        ap.error(f"--host {args.host}: not a loopback address; this endpoint listens on loopback only")
    if not 0 <= args.port <= 65535:
        ap.error(f"--port {args.port}: not a port")
    if args.max_body <= 0:
        ap.error("--max-body must be positive")
    scripts, fallback = [], None
    for spec in args.script:
        match, sep, path = spec.partition("=")
        try:
            if sep and match:
                scripts.append(Script(match, path))
            elif sep:
                ap.error(f"--script {spec}: empty MATCH")
            elif fallback is not None:
                ap.error("--script: only one fallback script (FILE without MATCH=)")
            else:
                fallback = Script(None, spec)
        except (OSError, ValueError) as e:
            ap.error(f"--script {spec}: {e}")

    server = Endpoint((args.host, args.port), scripts, fallback, args.log, args.max_body)
    port = server.server_address[1]
    if args.port_file:
        tmp = f"{args.port_file}.tmp{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(f"{port}\n")
        os.replace(tmp, args.port_file)
    print(f"model-endpoint: listening on http://{args.host}:{port}", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
