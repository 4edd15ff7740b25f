// streamd browser demo: microphone -> AudioWorklet (s16le) -> websocket /v1/stream -> live transcript.
//
// No build step, no external resources.  Protocol (docs/protocol.md, v1):
// after the socket opens we send {"type": "start", "sample_rate": <the
// AudioContext's rate>, "format": "s16le", ...}, wait for "ready", then send
// binary PCM chunks (100 ms each, produced by pcm-worklet.js).  Stop posts
// "flush" to the worklet, sends the tail and {"type": "eof"}; the server
// answers with the last final, "done", and closes with 1000.
//
// Page parameters: ?token=T (passed to the server as ?token=, for browsers
// cannot set an Authorization header), ?method=NAME (default search method),
// ?rate=HZ (ask for an AudioContext at that rate instead of the device's),
// ?record=1 (keep the audio that was sent; a link offers it as a WAV file).
//
// window.streamd exposes the page's state for debugging and tests: every
// message received (log), what was sent (sent), the state and errors.
"use strict";

(function () {
  const params = new URLSearchParams(location.search);
  const $ = (id) => document.getElementById(id);
  const CHUNK_SECONDS = 0.1;
  const MAX_PENDING_SECONDS = 10; // audio kept while waiting for "ready"

  const S = (window.streamd = {
    state: "idle",
    log: [], // every server message, in order, with the page time it arrived (field "_t")
    sent: { start: null, bytes: 0, chunks: 0, eof: false },
    sampleRate: null,
    closeCode: null,
    errors: [],
    record: params.get("record") === "1",
  });

  let ws = null;
  let ctx = null;
  let media = null;
  let node = null;
  let pending = [];
  let pendingBytes = 0;
  let recorded = [];
  let flushTimer = null;
  let bannerTimer = null;

  // ------------------------------------------------------------------ UI helpers

  function setState(state, text) {
    S.state = state;
    const el = $("status");
    el.textContent = text || state;
    el.className = "status " + state;
    $("start").disabled = !["idle", "done", "error"].includes(state);
    $("stop").disabled = !["connecting", "listening"].includes(state);
    $("method").disabled = !["idle", "done", "error"].includes(state);
  }

  function showError(message) {
    S.errors.push(message);
    const el = $("error");
    el.textContent = message;
    el.hidden = false;
  }

  function clearError() {
    $("error").hidden = true;
    $("error").textContent = "";
  }

  function fmt(t) {
    return typeof t === "number" ? t.toFixed(2) : "?";
  }

  // Confidence 0..1 -> hue 0 (red) .. 120 (green).
  function confColor(c) {
    const x = Math.max(0, Math.min(1, c));
    return `hsl(${Math.round(120 * x)}, 75%, ${Math.round(40 - 8 * x)}%)`;
  }

  function hideHint() {
    $("hint").hidden = true; // the first words replace the hint of what to say
  }

  function renderFinal(msg) {
    $("partial").textContent = "";
    if (!msg.text) return;
    hideHint();
    const div = document.createElement("div");
    div.className = "final";
    div.dataset.segment = String(msg.segment);
    const time = document.createElement("span");
    time.className = "time";
    time.textContent = `${fmt(msg.start)}–${fmt(msg.end)}`;
    div.appendChild(time);
    const words = Array.isArray(msg.words) && msg.words.length ? msg.words : [{ word: msg.text }];
    words.forEach((w, i) => {
      if (i) div.appendChild(document.createTextNode(" "));
      const span = document.createElement("span");
      span.className = "word";
      span.textContent = w.word;
      if (typeof w.conf === "number") {
        span.dataset.conf = String(w.conf);
        span.style.color = confColor(w.conf);
        span.title = `conf ${w.conf.toFixed(2)} · ${fmt(w.start)}–${fmt(w.end)} s`;
      }
      div.appendChild(span);
    });
    $("finals").appendChild(div);
    div.scrollIntoView({ block: "nearest" });
  }

  function renderWake(msg) {
    hideHint();
    const div = document.createElement("div");
    div.className = "wake";
    div.textContent = `wake word “${msg.keyword}” · score ${fmt(msg.score)} · ${fmt(msg.start)}–${fmt(msg.end)} s`;
    $("finals").appendChild(div);
    const banner = $("wake-banner");
    banner.textContent = `“${msg.keyword}”`;
    banner.hidden = false;
    clearTimeout(bannerTimer);
    bannerTimer = setTimeout(() => (banner.hidden = true), 2500);
  }

  // ------------------------------------------------------------------ server messages

  function onMessage(msg) {
    switch (msg.type) {
      case "ready":
        S.ready = msg;
        setState("listening", "listening");
        $("info").textContent =
          `session ${msg.session} · ${S.sampleRate} Hz s16le` +
          (msg.method ? ` · ${msg.method}` : "") +
          (msg.model && msg.model.name ? ` · model ${msg.model.name}` : "");
        for (const buf of pending) sendAudio(buf);
        pending = [];
        pendingBytes = 0;
        break;
      case "partial":
        $("partial").textContent = msg.text || "";
        if (msg.text) hideHint();
        break;
      case "final":
        renderFinal(msg);
        break;
      case "wake":
        renderWake(msg);
        break;
      case "error":
        showError(`server error ${msg.code}: ${msg.message}`);
        setState("error", msg.code || "error");
        break;
      case "done":
        setState("done", "done");
        break;
      default:
        break; // newer server messages are ignored
    }
  }

  // ------------------------------------------------------------------ audio out

  function sendAudio(buf) {
    ws.send(buf);
    S.sent.bytes += buf.byteLength;
    S.sent.chunks += 1;
    if (S.record) recorded.push(buf);
  }

  function onWorklet(e) {
    const d = e.data;
    if (d.pcm) {
      if (!ws || S.sent.eof) return;
      if ((S.state === "listening" || S.state === "finishing") && ws.readyState === WebSocket.OPEN) {
        sendAudio(d.pcm);
      } else {
        pending.push(d.pcm);
        pendingBytes += d.pcm.byteLength;
        while (pendingBytes > MAX_PENDING_SECONDS * 2 * S.sampleRate) pendingBytes -= pending.shift().byteLength;
      }
    }
    if (d.flushed) sendEof();
  }

  function sendEof() {
    clearTimeout(flushTimer);
    if (ws && ws.readyState === WebSocket.OPEN && !S.sent.eof) {
      ws.send(JSON.stringify({ type: "eof" }));
      S.sent.eof = true;
    }
    stopCapture();
  }

  function stopCapture() {
    if (node) {
      node.port.onmessage = null;
      node.disconnect();
      node = null;
    }
    if (media) {
      media.getTracks().forEach((t) => t.stop());
      media = null;
    }
    if (ctx) {
      ctx.close().catch(() => {});
      ctx = null;
    }
    if (S.record && recorded.length) {
      const link = $("download");
      link.href = URL.createObjectURL(new Blob([wavHeader(S.sent.bytes, S.sampleRate), ...recorded],
                                               { type: "audio/wav" }));
      link.hidden = false;
    }
  }

  function wavHeader(nbytes, rate) {
    const h = new DataView(new ArrayBuffer(44));
    const ascii = (off, s) => [...s].forEach((c, i) => h.setUint8(off + i, c.charCodeAt(0)));
    ascii(0, "RIFF"); h.setUint32(4, 36 + nbytes, true); ascii(8, "WAVE");
    ascii(12, "fmt "); h.setUint32(16, 16, true); h.setUint16(20, 1, true); h.setUint16(22, 1, true);
    h.setUint32(24, rate, true); h.setUint32(28, rate * 2, true); h.setUint16(32, 2, true); h.setUint16(34, 16, true);
    ascii(36, "data"); h.setUint32(40, nbytes, true);
    return h.buffer;
  }

  // The sent audio (s16le) as base64, with ?record=1 (debugging and tests).
  S.sentAudioBase64 = function () {
    let s = "";
    for (const buf of recorded) {
      const b = new Uint8Array(buf);
      for (let i = 0; i < b.length; i += 0x8000) s += String.fromCharCode.apply(null, b.subarray(i, i + 0x8000));
    }
    return btoa(s);
  };

  // ------------------------------------------------------------------ start / stop

  function wsUrl() {
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    const token = params.get("token");
    return `${proto}//${location.host}/v1/stream` + (token ? `?token=${encodeURIComponent(token)}` : "");
  }

  function fail(message) {
    showError(message);
    setState("error", "error");
    stopCapture();
    if (ws && ws.readyState <= WebSocket.OPEN) ws.close(1000, "client error");
  }

  async function start() {
    clearError();
    if (!location.host) return fail("open this page from the streamd server (http://HOST:PORT/), not as a file");
    if (!window.isSecureContext) {
      return fail("the microphone needs a secure context: open the page over https:// or on http://localhost");
    }
    if (!navigator.mediaDevices || !window.AudioWorkletNode) {
      return fail("this browser lacks getUserMedia or AudioWorklet");
    }
    S.sent = { start: null, bytes: 0, chunks: 0, eof: false };
    S.closeCode = null;
    recorded = [];
    pending = [];
    pendingBytes = 0;
    $("download").hidden = true;
    setState("connecting", "opening the microphone…");
    try {
      media = await navigator.mediaDevices.getUserMedia({
        audio: { channelCount: 1, echoCancellation: false, noiseSuppression: false, autoGainControl: false },
      });
    } catch (e) {
      return fail(`microphone: ${e.name}: ${e.message}`);
    }
    try {
      const rate = parseInt(params.get("rate") || "0", 10);
      ctx = rate ? new AudioContext({ sampleRate: rate }) : new AudioContext();
      await ctx.audioWorklet.addModule("pcm-worklet.js");
      S.sampleRate = ctx.sampleRate;
      node = new AudioWorkletNode(ctx, "pcm-capture", {
        processorOptions: { chunkSamples: Math.round(ctx.sampleRate * CHUNK_SECONDS) },
      });
      node.port.onmessage = onWorklet;
      const mute = ctx.createGain(); // keeps the graph pulled without playing the microphone back
      mute.gain.value = 0;
      ctx.createMediaStreamSource(media).connect(node);
      node.connect(mute).connect(ctx.destination);
      if (ctx.state === "suspended") await ctx.resume();
    } catch (e) {
      return fail(`audio setup failed: ${e.name}: ${e.message}`);
    }
    connect();
  }

  function connect() {
    setState("connecting", "connecting…");
    try {
      ws = new WebSocket(wsUrl());
    } catch (e) {
      return fail(`cannot open websocket: ${e.message}`);
    }
    ws.binaryType = "arraybuffer";
    const sock = ws;
    ws.onopen = () => {
      const start = { type: "start", sample_rate: S.sampleRate, format: "s16le", partials: true, keywords: true };
      const method = $("method").value || params.get("method");
      if (method) start.method = method;
      sock.send(JSON.stringify(start));
      S.sent.start = start;
      setState("connecting", "waiting for the server…");
    };
    ws.onmessage = (e) => {
      if (typeof e.data !== "string") return;
      let msg;
      try {
        msg = JSON.parse(e.data);
      } catch (err) {
        showError(`unreadable message from the server: ${String(e.data).slice(0, 80)}`);
        return;
      }
      S.log.push(Object.assign({ _t: performance.now() }, msg));
      onMessage(msg);
    };
    ws.onclose = (e) => {
      if (sock !== ws) return;
      S.closeCode = e.code;
      stopCapture();
      if (e.code === 1000 && S.state !== "error") {
        setState("done", S.state === "done" ? "done" : "closed");
      } else if (S.state !== "error") {
        const why = e.code === 1006 ? " (the server is unreachable, refused the connection, or it was lost)"
          : e.reason ? ` (${e.reason})` : "";
        showError(`connection closed with code ${e.code}${why}`);
        setState("error", `closed (${e.code})`);
      }
    };
  }

  function stop() {
    if (S.state === "listening" && node) {
      setState("finishing", "finishing…");
      node.port.postMessage({ cmd: "flush" });
      flushTimer = setTimeout(sendEof, 1000); // the worklet normally answers within one render quantum
    } else if (S.state === "connecting") {
      stopCapture();
      if (ws) ws.close(1000, "cancelled");
      ws = null;
      setState("idle", "idle");
    }
  }

  $("start").addEventListener("click", start);
  $("stop").addEventListener("click", stop);
  if (params.get("method")) $("method").value = params.get("method");
  window.addEventListener("pagehide", () => {
    stopCapture();
    if (ws) ws.close(1001, "page closed");
  });
  setState("idle", "idle");
})();
