// AudioWorklet processor "pcm-capture": microphone -> s16le chunks for the streamd websocket.
//
// Runs on the audio rendering thread.  Each process() call gets 128 float
// frames (per channel) at the AudioContext's sample rate; channels are
// averaged to mono, clamped to [-1, 1], scaled to 16-bit integers and
// written little-endian into a chunk of `chunkSamples` samples.  Full chunks
// are posted to the main thread as transferable ArrayBuffers (no copies on
// the main thread, no allocation per frame except one buffer per chunk).
// A {cmd: "flush"} message posts what is buffered (possibly empty) and then
// {flushed: true}, so the page can send the tail before eof.

class PcmCapture extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const opts = (options && options.processorOptions) || {};
    this.chunkSamples = Math.max(128, opts.chunkSamples | 0 || 1600);
    this.buf = new ArrayBuffer(this.chunkSamples * 2);
    this.view = new DataView(this.buf);
    this.fill = 0;
    this.stopped = false;
    this.port.onmessage = (e) => {
      if (e.data && e.data.cmd === "flush") {
        this.post(this.fill);
        this.port.postMessage({ flushed: true });
        this.stopped = true;
      }
    };
  }

  post(n) {
    if (n > 0) {
      const out = this.buf.slice(0, n * 2);
      this.port.postMessage({ pcm: out }, [out]);
    }
    this.buf = new ArrayBuffer(this.chunkSamples * 2);
    this.view = new DataView(this.buf);
    this.fill = 0;
  }

  process(inputs) {
    if (this.stopped) return false;
    const input = inputs[0];
    if (!input || input.length === 0) return true; // no source connected yet
    const n = input[0].length;
    const nch = input.length;
    for (let i = 0; i < n; i++) {
      let s = 0;
      for (let c = 0; c < nch; c++) s += input[c][i];
      s /= nch;
      s = s < -1 ? -1 : s > 1 ? 1 : s;
      this.view.setInt16(this.fill * 2, s < 0 ? Math.round(s * 32768) : Math.round(s * 32767), true);
      this.fill++;
      if (this.fill === this.chunkSamples) this.post(this.fill);
    }
    return true;
  }
}

registerProcessor("pcm-capture", PcmCapture);
