#!/usr/bin/env python3
"""Real LLM clients for the proxy's end-to-end tests (tests/it/llm_sdk.rs).

The official `openai` and `anthropic` SDKs (PyPI, pinned in
scripts/install-deps.sh) make calls through `tollgate serve --proxy`: chat
completions, the responses API and Anthropic's messages, each sync and
async, streamed and not. Each call prints one JSON line: what the SDK
parsed (the usage it read, the text), or the HTTP status it failed with.
The Rust tests compare that usage with what the upstream sent and with
what tollgate charged.

    llm_clients.py calls  --base-url URL [--base-url URL2 ...] CASE ...
    llm_clients.py swarm  --base-url URL ... --api API --requests N --concurrency C
    llm_clients.py serve  --base-url URL ...   (stdin: one `CASE URL_INDEX` a line)

A CASE is API[-stream]:MODE, API one of openai-chat, openai-responses,
anthropic, MODE sync or async (e.g. `openai-chat-stream:async`). With
several --base-url, call i goes to URL i mod n (a fleet of proxies).
`swarm` runs N async calls, C at a time, each line carrying its sequence
number `seq`. `serve` makes one call per line of its stdin, as a test
decides them. `--ca FILE` makes the SDKs trust a test CA (httpx's
`verify=`); `--header K:V` is sent with every call (the proxy's rules
key on it); `--anthropic-path P` puts the Anthropic client under URL + P
(llmock serves it under `/anthropic`).
"""

import argparse
import asyncio
import json
import ssl
import sys

try:
    import anthropic
    import openai
except ImportError as e:  # the Rust side turns this into the install command
    print(json.dumps({"import_error": str(e)}), flush=True)
    sys.exit(3)

PROMPT = "Hello!"
# Anthropic calls name their end user in metadata.user_id, as
# docs/llm-gateway.md keys them: the x-team header's value, when given.
USER_ID = "anonymous"


def verify(ca):
    if ca is None:
        return True
    return ssl.create_default_context(cafile=ca)


def clients(base, ca, headers, is_async, anthropic_path=""):
    """The two SDK clients for one proxy: no retries (a 429 must show as
    one), the test CA when given. Each SDK gets an HTTP client of its own
    kind (`DefaultHttpxClient`: the anthropic SDK is built on httpx2, the
    openai SDK on httpx), handed over with `http_client=`."""
    tls = {"verify": verify(ca), "timeout": 60}
    if is_async:
        oa_http = openai.DefaultAsyncHttpxClient(**tls)
        an_http = anthropic.DefaultAsyncHttpxClient(**tls)
        return (
            openai.AsyncOpenAI(base_url=base + "/v1", api_key="test", max_retries=0,
                               default_headers=headers, http_client=oa_http),
            anthropic.AsyncAnthropic(base_url=base + anthropic_path, api_key="test",
                                     max_retries=0, default_headers=headers,
                                     http_client=an_http),
            (oa_http, an_http),
        )
    oa_http = openai.DefaultHttpxClient(**tls)
    an_http = anthropic.DefaultHttpxClient(**tls)
    return (
        openai.OpenAI(base_url=base + "/v1", api_key="test", max_retries=0,
                      default_headers=headers, http_client=oa_http),
        anthropic.Anthropic(base_url=base + anthropic_path, api_key="test", max_retries=0,
                            default_headers=headers, http_client=an_http),
        (oa_http, an_http),
    )


def openai_usage(u):
    if u is None:
        return None
    if hasattr(u, "prompt_tokens"):
        return {"input": u.prompt_tokens, "output": u.completion_tokens, "total": u.total_tokens}
    return {"input": u.input_tokens, "output": u.output_tokens, "total": u.total_tokens}


def anthropic_usage(u):
    inp = u.input_tokens + (u.cache_creation_input_tokens or 0) + (u.cache_read_input_tokens or 0)
    return {"input": inp, "output": u.output_tokens, "total": inp + u.output_tokens}


def sync_call(api, oa, an):
    """One call with the sync clients: (usage, text) as the SDK parsed them."""
    if api == "openai-chat":
        r = oa.chat.completions.create(model="gpt-4o-mini",
                                       messages=[{"role": "user", "content": PROMPT}])
        return openai_usage(r.usage), r.choices[0].message.content
    if api == "openai-chat-stream":
        text, usage = "", None
        stream = oa.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": PROMPT}],
            stream=True, stream_options={"include_usage": True})
        for chunk in stream:
            for c in chunk.choices:
                text += c.delta.content or ""
            if chunk.usage is not None:
                usage = openai_usage(chunk.usage)
        return usage, text
    if api == "openai-responses":
        r = oa.responses.create(model="gpt-4o-mini", input=PROMPT)
        return openai_usage(r.usage), r.output_text
    if api == "openai-responses-stream":
        with oa.responses.stream(model="gpt-4o-mini", input=PROMPT) as stream:
            for _ in stream:
                pass
            r = stream.get_final_response()
        return openai_usage(r.usage), r.output_text
    if api == "anthropic":
        m = an.messages.create(model="claude-sonnet-4-5", max_tokens=64, metadata={"user_id": USER_ID},
                               messages=[{"role": "user", "content": PROMPT}])
        return anthropic_usage(m.usage), "".join(b.text for b in m.content if b.type == "text")
    if api == "anthropic-stream":
        with an.messages.stream(model="claude-sonnet-4-5", max_tokens=64, metadata={"user_id": USER_ID},
                                messages=[{"role": "user", "content": PROMPT}]) as stream:
            m = stream.get_final_message()
        return anthropic_usage(m.usage), "".join(b.text for b in m.content if b.type == "text")
    raise SystemExit(f"unknown API {api}")


async def async_call(api, oa, an):
    """[`sync_call`] with the async clients."""
    if api == "openai-chat":
        r = await oa.chat.completions.create(model="gpt-4o-mini",
                                             messages=[{"role": "user", "content": PROMPT}])
        return openai_usage(r.usage), r.choices[0].message.content
    if api == "openai-chat-stream":
        text, usage = "", None
        stream = await oa.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": PROMPT}],
            stream=True, stream_options={"include_usage": True})
        async for chunk in stream:
            for c in chunk.choices:
                text += c.delta.content or ""
            if chunk.usage is not None:
                usage = openai_usage(chunk.usage)
        return usage, text
    if api == "openai-responses":
        r = await oa.responses.create(model="gpt-4o-mini", input=PROMPT)
        return openai_usage(r.usage), r.output_text
    if api == "openai-responses-stream":
        async with oa.responses.stream(model="gpt-4o-mini", input=PROMPT) as stream:
            async for _ in stream:
                pass
            r = await stream.get_final_response()
        return openai_usage(r.usage), r.output_text
    if api == "anthropic":
        m = await an.messages.create(model="claude-sonnet-4-5", max_tokens=64, metadata={"user_id": USER_ID},
                                     messages=[{"role": "user", "content": PROMPT}])
        return anthropic_usage(m.usage), "".join(b.text for b in m.content if b.type == "text")
    if api == "anthropic-stream":
        async with an.messages.stream(model="claude-sonnet-4-5", max_tokens=64, metadata={"user_id": USER_ID},
                                      messages=[{"role": "user", "content": PROMPT}]) as stream:
            m = await stream.get_final_message()
        return anthropic_usage(m.usage), "".join(b.text for b in m.content if b.type == "text")
    raise SystemExit(f"unknown API {api}")


def failure(e):
    """A failed call as a line: the HTTP status when the server answered."""
    status = getattr(e, "status_code", None)
    return {"ok": False, "status": status, "error": f"{type(e).__name__}: {e}"[:500]}


def emit(line):
    print(json.dumps(line), flush=True)


def one_call(case, base, args, headers, seq):
    """Makes one call of `case` to `base` with fresh clients; prints its line."""
    api, _, mode = case.partition(":")
    line = {"case": case, "seq": seq}
    if mode == "sync":
        oa, an, http = clients(base, args.ca, headers, False, args.anthropic_path)
        try:
            usage, text = sync_call(api, oa, an)
            line.update(ok=True, status=200, usage=usage, text=text)
        except (openai.APIError, anthropic.APIError) as e:
            line.update(failure(e))
        finally:
            for h in http:
                h.close()
    elif mode == "async":
        async def one():
            oa, an, http = clients(base, args.ca, headers, True, args.anthropic_path)
            try:
                usage, text = await async_call(api, oa, an)
                line.update(ok=True, status=200, usage=usage, text=text)
            except (openai.APIError, anthropic.APIError) as e:
                line.update(failure(e))
            finally:
                for h in http:
                    await h.aclose()
        asyncio.run(one())
    else:
        raise SystemExit(f"{case}: the mode is sync or async")
    emit(line)


def run_calls(args, headers):
    for i, case in enumerate(args.case):
        one_call(case, args.base_url[i % len(args.base_url)], args, headers, i)


def serve(args, headers):
    """One call per line of stdin, `CASE URL_INDEX`, until it ends: a test
    that decides each call after the last (and waits in between) pays for
    the SDKs' import once."""
    for seq, line in enumerate(sys.stdin):
        case, index = line.split()
        one_call(case, args.base_url[int(index)], args, headers, seq)


async def swarm(args, headers):
    """N async calls, C at a time (one client per proxy, shared by all)."""
    per_base = [clients(b, args.ca, headers, True, args.anthropic_path) for b in args.base_url]
    gate = asyncio.Semaphore(args.concurrency)

    async def one(seq):
        oa, an, _ = per_base[seq % len(per_base)]
        line = {"case": args.api, "seq": seq}
        async with gate:
            try:
                usage, text = await async_call(args.api, oa, an)
                line.update(ok=True, status=200, usage=usage, text=text)
            except (openai.APIError, anthropic.APIError) as e:
                line.update(failure(e))
        emit(line)

    await asyncio.gather(*(one(i) for i in range(args.requests)))
    for _, _, http in per_base:
        for h in http:
            await h.aclose()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("calls", "swarm", "serve"):
        s = sub.add_parser(name)
        s.add_argument("--base-url", action="append", required=True)
        s.add_argument("--ca")
        s.add_argument("--header", action="append", default=[])
        s.add_argument("--anthropic-path", default="")
    sub.choices["calls"].add_argument("case", nargs="+")
    sw = sub.choices["swarm"]
    sw.add_argument("--api", required=True)
    sw.add_argument("--requests", type=int, required=True)
    sw.add_argument("--concurrency", type=int, required=True)
    args = p.parse_args()
    headers = dict(h.split(":", 1) for h in args.header)
    global USER_ID
    USER_ID = headers.get("x-team", USER_ID)
    if args.cmd == "calls":
        run_calls(args, headers)
    elif args.cmd == "serve":
        serve(args, headers)
    else:
        asyncio.run(swarm(args, headers))


if __name__ == "__main__":
    main()
