// goggles preview: stereo frames over a WebSocket, shown side by side, and in a headset with WebXR.
"use strict";

const KIND_STEREO = 0, KIND_THIRD = 1;
const status = document.getElementById("status");
const counter = document.getElementById("frames");
const latencyText = document.getElementById("latency");
const images = { [KIND_STEREO]: document.getElementById("stereo"), [KIND_THIRD]: document.getElementById("third") };
let frames = 0;
let latestStereo = null;  // an ImageBitmap of the newest stereo pair, for the headset

function connect() {
  const socket = new WebSocket(`ws://${location.host}/stream${location.search}`);  // ?token=... when exposed
  socket.binaryType = "arraybuffer";
  socket.onopen = () => { status.textContent = "connected"; status.className = ""; };
  socket.onclose = () => {
    status.textContent = "disconnected, retrying"; status.className = "bad";
    setTimeout(connect, 1000);
  };
  socket.onmessage = async (event) => {
    // [kind: uint8][sent: float64 ms since epoch, little endian][JPEG bytes]
    const view = new DataView(event.data);
    const kind = view.getUint8(0);
    const sent = view.getFloat64(1, true);
    const blob = new Blob([event.data.slice(9)], { type: "image/jpeg" });
    const image = images[kind];
    if (!image) return;
    const old = image.src;
    image.src = URL.createObjectURL(blob);
    if (old) URL.revokeObjectURL(old);
    if (kind === KIND_STEREO) {
      frames += 1;
      counter.textContent = String(frames);
      document.title = `goggles preview (${frames} frames)`;
      latencyText.textContent = `${Math.max(0, Date.now() - sent).toFixed(0)} ms`;
      if (xrSession) latestStereo = await createImageBitmap(blob);
    }
  };
}
connect();

// ---------------------------------------------------------------- WebXR: each eye sees its own image
let xrSession = null;
const vrButton = document.getElementById("vr");
if (navigator.xr) {
  navigator.xr.isSessionSupported("immersive-vr").then((ok) => { vrButton.hidden = !ok; });
}
vrButton.onclick = async () => {
  if (xrSession) { xrSession.end(); return; }
  const canvas = document.createElement("canvas");
  const gl = canvas.getContext("webgl2", { xrCompatible: true });
  xrSession = await navigator.xr.requestSession("immersive-vr");
  xrSession.updateRenderState({ baseLayer: new XRWebGLLayer(xrSession, gl) });
  const space = await xrSession.requestReferenceSpace("local");
  const draw = eyeQuad(gl);
  vrButton.textContent = "Exit VR";
  xrSession.addEventListener("end", () => { xrSession = null; vrButton.textContent = "Enter VR"; });
  const onFrame = (time, frame) => {
    frame.session.requestAnimationFrame(onFrame);
    const pose = frame.getViewerPose(space);
    const layer = frame.session.renderState.baseLayer;
    gl.bindFramebuffer(gl.FRAMEBUFFER, layer.framebuffer);
    gl.clearColor(0, 0, 0, 1);
    gl.clear(gl.COLOR_BUFFER_BIT);
    if (!pose || !latestStereo) return;
    for (const v of pose.views) {
      const vp = layer.getViewport(v);
      gl.viewport(vp.x, vp.y, vp.width, vp.height);
      draw(latestStereo, v.eye === "right" ? 1 : 0);  // the right eye gets the right half
    }
  };
  xrSession.requestAnimationFrame(onFrame);
};

function eyeQuad(gl) {
  // A full-viewport quad textured with one half of the side-by-side stereo image.
  const vs = `#version 300 es
    in vec2 p; out vec2 uv; uniform float eye;
    void main() { uv = vec2((p.x * 0.5 + 0.5) * 0.5 + 0.5 * eye, 0.5 - p.y * 0.5); gl_Position = vec4(p, 0, 1); }`;
  const fs = `#version 300 es
    precision mediump float; in vec2 uv; out vec4 color; uniform sampler2D image;
    void main() { color = texture(image, uv); }`;
  const program = gl.createProgram();
  for (const [type, source] of [[gl.VERTEX_SHADER, vs], [gl.FRAGMENT_SHADER, fs]]) {
    const shader = gl.createShader(type);
    gl.shaderSource(shader, source);
    gl.compileShader(shader);
    gl.attachShader(program, shader);
  }
  gl.linkProgram(program);
  const buffer = gl.createBuffer();
  gl.bindBuffer(gl.ARRAY_BUFFER, buffer);
  gl.bufferData(gl.ARRAY_BUFFER, new Float32Array([-1, -1, 1, -1, -1, 1, 1, 1]), gl.STATIC_DRAW);
  const texture = gl.createTexture();
  const eye = gl.getUniformLocation(program, "eye");
  return (bitmap, eyeIndex) => {
    gl.useProgram(program);
    gl.bindBuffer(gl.ARRAY_BUFFER, buffer);
    const loc = gl.getAttribLocation(program, "p");
    gl.enableVertexAttribArray(loc);
    gl.vertexAttribPointer(loc, 2, gl.FLOAT, false, 0, 0);
    gl.bindTexture(gl.TEXTURE_2D, texture);
    gl.texImage2D(gl.TEXTURE_2D, 0, gl.RGBA, gl.RGBA, gl.UNSIGNED_BYTE, bitmap);
    gl.texParameteri(gl.TEXTURE_2D, gl.TEXTURE_MIN_FILTER, gl.LINEAR);
    gl.uniform1f(eye, eyeIndex);
    gl.drawArrays(gl.TRIANGLE_STRIP, 0, 4);
  };
}
