/* otel-ort report: draws the profile data embedded in this page (its layout is described in
   otel_ort/report/model.py). No network, no libraries: plain DOM and SVG. */
(function () {
  "use strict";

  var D = JSON.parse(document.getElementById("report-data").textContent);
  var S = D.s;
  var PERF = D.perf;
  var PERF_NS = D.perfNs || [];
  // node and kernel fields
  var N_NAME = 0, N_OP = 1, N_PROV = 2, N_TID = 3, N_TS = 4, N_DUR = 5, N_IN = 6, N_OUT = 7;
  var K_NODE = 0, K_NAME = 1, K_TS = 2, K_DUR = 3, K_DETAIL = 4;
  // timeline geometry, in CSS pixels
  var LABEL_W = 190, AXIS_H = 24, LANE_H = 22, KLANE_H = 14, PAD = 2;
  var PALETTE = [
    "#4c6ef5", "#f59f00", "#37b24d", "#e64980", "#15aabf", "#ae3ec9",
    "#fd7e14", "#82c91e", "#7950f2", "#fa5252", "#12b886", "#228be6",
  ];

  var threadNames = new Map(D.th.map(function (t) { return [t[0], t[1]]; }));
  var opRank = new Map();
  D.ops.forEach(function (op, rank) { opRank.set(op, rank); });
  var state = { pos: 0, run: null, layout: null, extent: [0, 1], view: [0, 1], plotW: 1, sel: -1 };
  var timers = {};
  var focusStyle = null; // a <style> dimming the nodes of other op types than the hovered one

  function $(id) { return document.getElementById(id); }

  function esc(text) {
    return String(text).replace(/[&<>"']/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c];
    });
  }

  function fmtDur(us) {
    if (us >= 1e6) return (us / 1e6).toFixed(3) + " s";
    if (us >= 1e3) return (us / 1e3).toFixed(3) + " ms";
    return (Math.round(us * 10) / 10) + " µs";
  }

  function fmtCount(value) {
    return value === null || value === undefined ? "–" : Number(value).toLocaleString("en-US");
  }

  function fmtPerf(value, at) {  // a time event's nanoseconds as a duration
    return PERF_NS[at] && value !== null && value !== undefined ? fmtDur(value / 1000) : fmtCount(value);
  }

  function pct(part, whole) {
    return whole > 0 ? (100 * part / whole).toFixed(1) + "%" : "–";
  }

  function opColor(op) {
    var rank = opRank.has(op) ? opRank.get(op) : opRank.size + op;
    if (rank < PALETTE.length) return PALETTE[rank];
    return "hsl(" + Math.round((rank * 137.508) % 360) + ",48%,60%)";
  }

  function threadLabel(tid) {
    var name = threadNames.get(tid);
    if (name) return name.indexOf(String(tid)) >= 0 ? name : name + " · " + tid;
    return tid === null ? "thread ?" : "thread " + tid;
  }

  function later(name, ms, fn) {
    clearTimeout(timers[name]);
    timers[name] = setTimeout(fn, ms);
  }

  /* ---------- header, notes, run picker ---------- */

  function renderPage() {
    $("file-name").textContent = D.file;
    var meta = D.meta.map(function (m) { return esc(m[0]) + " <code>" + esc(m[1]) + "</code>"; });
    $("file-meta").innerHTML = meta.join(" · ");
    $("notes").innerHTML = D.notes.map(function (n) { return "<li>" + esc(n) + "</li>"; }).join("");
    $("footer").textContent =
      "otel-ort " + D.version + " report of " + D.path + " · times from the run's start" +
      " · absolute time base: " + D.timeBase;
    if (D.runs.length > 1) {
      $("run-picker").innerHTML = D.runs.map(function (r, pos) {
        var text = "run " + r.i + " · " + fmtDur(r.dur) + " · " + r.nn + " nodes" +
          (r.e ? "" : " (not embedded: --run " + r.i + ")");
        return "<option value=\"" + pos + "\"" + (r.e ? "" : " disabled") + ">" + esc(text) +
          "</option>";
      }).join("");
      $("run-pick").hidden = false;
      $("run-picker").addEventListener("change", function (e) { render(+e.target.value); });
    }
    var rules = D.ops.map(function (op) { return "rect.node.o" + op + "{fill:" + opColor(op) + "}"; });
    var style = document.createElement("style");
    style.textContent = rules.join("\n");
    document.head.appendChild(style);
    focusStyle = document.createElement("style");
    document.head.appendChild(focusStyle);
  }

  function renderRunHeader(run) {
    $("trace-id").textContent = run.trace || "none";
    $("span-id").textContent = run.span || "none";
    $("span-id").parentNode.hidden = !run.span;
    $("ids").classList.toggle("none", !run.trace);
    $("no-ids").hidden = !!(run.trace || run.span);
    var threads = new Set(run.n.map(function (n) { return n[N_TID]; }));
    var workers = (run.pools || []).reduce(function (sum, p) { return sum + p[1]; }, 0);
    var parts = [
      "<b>run " + run.i + "</b>" + (D.runs.length > 1 ? " of " + D.runs.length : ""),
      "<b>" + esc(fmtDur(run.dur)) + "</b>",
      run.n.length.toLocaleString("en-US") + " nodes on " + plural(threads.size, "thread") +
        (workers ? " (helped by " + plural(workers, "ORT pool thread") + ")" : ""),
    ];
    if (run.k.length) parts.push(run.k.length.toLocaleString("en-US") + " GPU kernels");
    parts.push("started " + esc(run.start.replace("T", " ").replace("Z", " UTC")));
    if (!run.ok) parts.push("<b>incomplete run</b> (the file ends inside it)");
    $("run-meta").innerHTML = parts.join(" · ");
    $("run-picker").value = String(state.pos);
    renderCpu(run);
  }

  function plural(count, noun) {
    return count.toLocaleString("en-US") + " " + noun + (count === 1 ? "" : "s");
  }

  // A node's perf time count (task-clock) is the CPU time of every thread counted during its
  // window, summed: the thread running it and ORT's pool threads, which spin while they wait
  // for work. The file keeps that sum, not each thread's part: a node thread's part is at most
  // its wall time in the nodes, so at least the rest is the other threads'.
  function renderCpu(run) {
    var box = $("cpu"), cpu = run.cpu;
    box.hidden = !cpu;
    if (!cpu) { box.innerHTML = ""; return; }
    var total = cpu.total / 1000; // ns → µs
    var pools = (run.pools || []).map(function (p) {
      return "<code>" + esc(p[0]) + "</code>, " + plural(p[1], "thread") + " besides the caller";
    });
    var rows = cpu.threads.map(function (t) {
      return "<tr><td>" + esc(threadLabel(t[0])) + "</td><td>runs the nodes</td><td class=\"num\">" +
        esc(fmtDur(t[1])) + "</td><td class=\"num\">≤ " + esc(fmtDur(Math.min(t[1], total))) +
        "</td><td class=\"muted\">at most its wall time in the nodes</td></tr>";
    });
    rows.push("<tr><td>" + (pools.length ? "ORT's pool: " + pools.join("; ") :
      "other threads counted (ORT's pool)") + "</td><td>runs parallel parts, may spin waiting</td>" +
      "<td class=\"num\">–</td><td class=\"num\">≥ " + esc(fmtDur(Math.max(0, total - cpu.wall))) +
      "</td><td class=\"muted\">the rest of the sum</td></tr>");
    var ratio = cpu.wall > 0 ? (total / cpu.wall).toFixed(1) + "×" : "–";
    box.innerHTML = "<div class=\"cpu-head\"><b>CPU per thread</b> · " + esc(cpu.alias) + " in " +
      (run.d.length ? "the " + plural(cpu.nodes, "outermost node") : plural(cpu.nodes, "node")) +
      ": <b>" + esc(fmtDur(total)) + "</b>, <b>" + ratio + "</b> their " + esc(fmtDur(cpu.wall)) +
      " wall time</div><div class=\"muted\">" + esc(cpu.alias) + " sums the CPU time of every " +
      "thread counted during a node: the thread running it and ORT's intra-op pool threads, " +
      "which spin while they wait for work (<code>session.intra_op.allow_spinning=0</code> stops " +
      "that). The file keeps the sum per node, not each thread's part, so the parts below are " +
      "bounds.</div><table class=\"cpu-table\"><thead><tr><th>thread</th><th>role</th>" +
      "<th class=\"num\">wall time in nodes</th><th class=\"num\">CPU (" + esc(cpu.alias) +
      ")</th><th></th></tr></thead><tbody>" + rows.join("") + "</tbody></table>";
  }

  /* ---------- timeline ---------- */

  function layoutOf(run) {
    var order = [];
    var seen = new Set();
    run.n.forEach(function (n) {
      if (!seen.has(n[N_TID])) { seen.add(n[N_TID]); order.push(n[N_TID]); }
    });
    var withKernels = new Set();
    var orphans = false;
    run.k.forEach(function (k) {
      if (k[K_NODE] < 0) orphans = true; else withKernels.add(run.n[k[K_NODE]][N_TID]);
    });
    var depthOf = new Map(); // per thread, its deepest node's nesting depth
    run.n.forEach(function (n, i) {
      var depth = run.d.length ? run.d[i] : 0;
      if (!(depthOf.get(n[N_TID]) >= depth)) depthOf.set(n[N_TID], depth);
    });
    var lanes = [], nodeY = new Map(), kernelY = new Map(), y = 0, orphanY = -1;
    order.forEach(function (tid, at) {
      var cls = at % 2 ? "alt" : "";
      lanes.push({ y: y, h: LANE_H, label: threadLabel(tid), cls: cls });
      nodeY.set(tid, y);
      y += LANE_H;
      for (var depth = 1; depth <= depthOf.get(tid); depth++) { // a Loop's, If's, Scan's subgraph
        lanes.push({ y: y, h: LANE_H, label: "↳ subgraph nodes" + (depth > 1 ? " · depth " + depth : ""),
          cls: cls + " sub", indent: 10 * depth });
        y += LANE_H;
      }
      if (withKernels.has(tid)) {
        lanes.push({ y: y, h: KLANE_H, label: "↳ GPU kernels", cls: "k" });
        kernelY.set(tid, y);
        y += KLANE_H;
      }
    });
    if (orphans) {
      lanes.push({ y: y, h: KLANE_H, label: "GPU kernels (no node)", cls: "k" });
      orphanY = y;
      y += KLANE_H;
    }
    return { lanes: lanes, nodeY: nodeY, kernelY: kernelY, orphanY: orphanY, height: Math.max(y, LANE_H) };
  }

  function extentOf(run) {
    var start = 0, end = run.dur;
    run.n.forEach(function (n) {
      if (n[N_TS] < start) start = n[N_TS];
      if (n[N_TS] + n[N_DUR] > end) end = n[N_TS] + n[N_DUR];
    });
    run.k.forEach(function (k) {
      if (k[K_TS] < start) start = k[K_TS];
      if (k[K_TS] + k[K_DUR] > end) end = k[K_TS] + k[K_DUR];
    });
    return [start, end > start ? end : start + 1];
  }

  function renderTimeline(run, resetView) {
    var box = $("timeline");
    var width = Math.max(box.clientWidth, LABEL_W + 200);
    var L = layoutOf(run);
    state.layout = L;
    state.plotW = width - LABEL_W;
    if (resetView) {
      state.extent = extentOf(run);
      state.view = state.extent.slice();
    }
    var height = AXIS_H + L.height;
    var lanes = L.lanes.map(function (lane) {
      var label = lane.label.length > 30 ? lane.label.slice(0, 29) + "…" : lane.label;
      return "<rect class=\"lane-bg " + lane.cls + "\" x=\"0\" y=\"" + (AXIS_H + lane.y) +
        "\" width=\"" + width + "\" height=\"" + lane.h + "\"/><text class=\"lane-label " +
        lane.cls + "\" x=\"" + (8 + (lane.indent || 0)) + "\" y=\"" + (AXIS_H + lane.y + lane.h / 2 + 4) + "\"><title>" +
        esc(lane.label) + "</title>" + esc(label) + "</text>";
    }).join("");
    box.innerHTML = "<svg id=\"tl\" width=\"" + width + "\" height=\"" + height + "\">" +
      "<g id=\"lanes\">" + lanes + "</g><g id=\"axis\" transform=\"translate(" + LABEL_W +
      ",0)\"></g><svg id=\"plot\" x=\"" + LABEL_W + "\" y=\"" + AXIS_H + "\" width=\"" +
      state.plotW + "\" height=\"" + L.height + "\" preserveAspectRatio=\"none\" viewBox=\"" +
      viewBox() + "\"><g id=\"bars\">" + barsMarkup(run) + "</g></svg></svg>";
    drawAxis();
  }

  function viewBox() {
    return state.view[0] + " 0 " + (state.view[1] - state.view[0]) + " " + state.layout.height;
  }

  function barsMarkup(run) {
    var L = state.layout;
    var minW = (state.view[1] - state.view[0]) / state.plotW; // one pixel, in µs
    var h = LANE_H - 2 * PAD, kh = KLANE_H - 2 * PAD;
    var parts = new Array(run.n.length + run.k.length);
    for (var i = 0; i < run.n.length; i++) {
      var n = run.n[i];
      parts[i] = "<rect class=\"node o" + n[N_OP] + (i === state.sel ? " sel" : "") +
        "\" data-i=\"" + i + "\" x=\"" + n[N_TS] + "\" y=\"" +
        (L.nodeY.get(n[N_TID]) + (run.d.length ? run.d[i] * LANE_H : 0) + PAD) +
        "\" width=\"" + (n[N_DUR] > minW ? n[N_DUR] : minW) + "\" height=\"" + h + "\"/>";
    }
    for (var j = 0; j < run.k.length; j++) {
      var k = run.k[j];
      var y = k[K_NODE] < 0 ? L.orphanY : L.kernelY.get(run.n[k[K_NODE]][N_TID]);
      parts[run.n.length + j] = "<rect class=\"kernel" + (k[K_NODE] < 0 ? " orphan" : "") +
        "\" data-k=\"" + j + "\" x=\"" + k[K_TS] + "\" y=\"" + (y + PAD) + "\" width=\"" +
        (k[K_DUR] > minW ? k[K_DUR] : minW) + "\" height=\"" + kh + "\"/>";
    }
    return parts.join("");
  }

  function niceStep(raw) {
    var power = Math.pow(10, Math.floor(Math.log10(raw)));
    var unit = raw / power;
    return (unit <= 1 ? 1 : unit <= 2 ? 2 : unit <= 5 ? 5 : 10) * power;
  }

  function tickLabel(t, step) {
    var scale = step >= 1e6 ? 1e6 : step >= 1e3 ? 1e3 : 1;
    var unit = scale === 1e6 ? " s" : scale === 1e3 ? " ms" : " µs";
    var digits = Math.max(0, -Math.floor(Math.log10(step / scale) + 1e-9));
    return (t / scale).toFixed(Math.min(digits, 6)) + unit;
  }

  function drawAxis() {
    var v0 = state.view[0], v1 = state.view[1], span = v1 - v0;
    var step = niceStep(span / Math.max(2, state.plotW / 110));
    var height = AXIS_H + state.layout.height;
    var out = [];
    for (var t = Math.ceil(v0 / step) * step; t <= v1; t += step) {
      var x = ((t - v0) / span * state.plotW).toFixed(1);
      out.push("<line class=\"tick\" x1=\"" + x + "\" x2=\"" + x + "\" y1=\"" + (AXIS_H - 6) +
        "\" y2=\"" + height + "\"/><text class=\"tick-label\" x=\"" + (+x + 3) + "\" y=\"" +
        (AXIS_H - 9) + "\">" + tickLabel(t, step) + "</text>");
    }
    $("axis").innerHTML = out.join("");
  }

  function setView(v0, v1, immediate) {
    var e0 = state.extent[0], e1 = state.extent[1];
    var span = Math.min(Math.max(v1 - v0, Math.min(0.2, e1 - e0)), e1 - e0);
    v0 = Math.min(Math.max(v0, e0), e1 - span);
    state.view = [v0, v0 + span];
    $("plot").setAttribute("viewBox", viewBox());
    drawAxis();
    var rebuild = function () { $("bars").innerHTML = barsMarkup(state.run); };
    if (immediate) rebuild(); else later("bars", 150, rebuild); // keep 1-px minimum widths
  }

  function plotX(event) {
    return event.clientX - $("timeline").getBoundingClientRect().left - LABEL_W;
  }

  function installTimelineEvents() {
    var box = $("timeline");
    var drag = null;
    box.addEventListener("wheel", function (e) {
      var x = plotX(e);
      if (x < 0) return;
      e.preventDefault();
      var v0 = state.view[0], span = state.view[1] - v0;
      var at = v0 + x / state.plotW * span;
      var next = span * Math.exp((e.deltaY || e.deltaX) * 0.0015);
      setView(at - x / state.plotW * next, at - x / state.plotW * next + next);
    }, { passive: false });
    box.addEventListener("mousedown", function (e) {
      if (e.button !== 0 || plotX(e) < 0) return;
      drag = { x: e.clientX, view: state.view.slice() };
      $("plot").classList.add("dragging");
      hideTip();
    });
    window.addEventListener("mousemove", function (e) {
      if (drag) {
        var shift = (drag.x - e.clientX) / state.plotW * (drag.view[1] - drag.view[0]);
        setView(drag.view[0] + shift, drag.view[1] + shift);
      } else if (!$("tooltip").hidden) {
        placeTip(e);
      }
    });
    window.addEventListener("mouseup", function () {
      if (drag) { drag = null; $("plot").classList.remove("dragging"); }
    });
    box.addEventListener("dblclick", function () { setView(state.extent[0], state.extent[1], true); });
    box.addEventListener("mouseover", function (e) {
      if (drag) return;
      var target = e.target;
      if (target.classList.contains("node")) showTip(nodeTip(+target.getAttribute("data-i")), e);
      else if (target.classList.contains("kernel")) showTip(kernelTip(+target.getAttribute("data-k")), e);
    });
    box.addEventListener("mouseout", function (e) {
      var to = e.relatedTarget;
      if (!to || !to.classList || !(to.classList.contains("node") || to.classList.contains("kernel"))) hideTip();
    });
    window.addEventListener("resize", function () {
      later("resize", 150, function () {
        var view = state.view.slice();
        renderTimeline(state.run, false);
        setView(view[0], view[1], true);
      });
    });
  }

  /* ---------- tooltip ---------- */

  function row(label, value) {
    return "<tr><td>" + esc(label) + "</td><td>" + value + "</td></tr>";
  }

  function nodeTip(i) {
    var run = state.run, n = run.n[i];
    var rows = [
      row("op type", "<span class=\"swatch\" style=\"background:" + opColor(n[N_OP]) + "\"></span>" + esc(S[n[N_OP]])),
      row("provider", esc(S[n[N_PROV]])),
      row("thread", esc(threadLabel(n[N_TID]))),
      row("duration", "<b>" + esc(fmtDur(n[N_DUR])) + "</b> · " + pct(n[N_DUR], run.dur) + " of the run"),
      row("start", "+" + esc(fmtDur(n[N_TS]))),
    ];
    if (run.h.length && run.h[i] >= 0) {
      var holder = run.n[run.h[i]];
      rows.push(row("inside", esc(S[holder[N_NAME]]) + " (" + esc(S[holder[N_OP]]) +
        ", its subgraph) · depth " + run.d[i]));
    }
    rows.push(
      row("inputs", esc(S[n[N_IN]] || "–")),
      row("outputs", esc(S[n[N_OUT]] || "–"))
    );
    var kernels = run.k.filter(function (k) { return k[K_NODE] === i; });
    if (kernels.length) {
      var total = kernels.reduce(function (sum, k) { return sum + k[K_DUR]; }, 0);
      rows.push(row("GPU kernels", kernels.length + " · " + esc(fmtDur(total))));
    }
    var counts = run.c.length ? run.c[i] : null;
    if (PERF.length && counts) {
      rows.push("<tr class=\"perf-head\"><td colspan=\"2\">perf counters</td></tr>");
      PERF.forEach(function (alias, at) {
        rows.push(row(alias + (PERF_NS[at] ? " (all threads)" : ""), esc(fmtPerf(counts[at], at))));
      });
    }
    return "<div class=\"tt-name\">" + esc(S[n[N_NAME]]) + "</div><table>" + rows.join("") + "</table>";
  }

  function kernelTip(j) {
    var run = state.run, k = run.k[j];
    var rows = [
      row("node", k[K_NODE] < 0 ? "none found" : esc(S[run.n[k[K_NODE]][N_NAME]])),
      row("duration", "<b>" + esc(fmtDur(k[K_DUR])) + "</b>"),
      row("start", "+" + esc(fmtDur(k[K_TS]))),
    ];
    if (S[k[K_DETAIL]]) rows.push(row("launch", esc(S[k[K_DETAIL]])));
    return "<div class=\"tt-name\">GPU kernel " + esc(S[k[K_NAME]]) + "</div><table>" + rows.join("") + "</table>";
  }

  function showTip(markup, event) {
    var tip = $("tooltip");
    tip.innerHTML = markup;
    tip.hidden = false;
    placeTip(event);
  }

  function placeTip(event) {
    var tip = $("tooltip");
    var x = event.clientX + 14, y = event.clientY + 14;
    if (x + tip.offsetWidth > window.innerWidth - 4) x = Math.max(4, event.clientX - tip.offsetWidth - 14);
    if (y + tip.offsetHeight > window.innerHeight - 4) y = Math.max(4, event.clientY - tip.offsetHeight - 14);
    tip.style.left = x + "px";
    tip.style.top = y + "px";
  }

  function hideTip() { $("tooltip").hidden = true; }

  /* ---------- op types ---------- */

  function renderOps(run) {
    var most = run.ot.length ? run.ot[0][2] : 1;
    var sum = run.ot.reduce(function (total, o) { return total + o[2]; }, 0);
    $("ops-hint").textContent = "self time, % of the run's wall time (a Loop, If or Scan " +
      "without its subgraphs' nodes)" + (sum > run.dur * 1.001 ?
      " (nodes ran in parallel: the shares add up to more than 100%)" : "") +
      " · hover: show in the timeline";
    $("ops").innerHTML = run.ot.map(function (o) {
      var op = o[0], color = opColor(op);
      return "<div class=\"op-row\" data-op=\"" + op + "\"><span class=\"op-name\" title=\"" +
        esc(S[op]) + "\"><span class=\"swatch\" style=\"background:" + color + "\"></span>" +
        esc(S[op]) + "</span><span class=\"op-track\"><span class=\"op-bar\" style=\"width:" +
        (100 * o[2] / (most || 1)).toFixed(2) + "%;background:" + color +
        "\"></span></span><span class=\"op-value\"><b>" + pct(o[2], run.dur) + "</b> · " +
        esc(fmtDur(o[2])) + " · " + o[1] + "×</span></div>";
    }).join("") || "<p class=\"muted\">no nodes in this run</p>";
  }

  function installOpEvents() {
    $("ops").addEventListener("mouseover", function (e) {
      var target = e.target.closest(".op-row");
      focusStyle.textContent = target ?
        "#bars rect.node:not(.o" + target.getAttribute("data-op") + "){opacity:.18}" : "";
    });
    $("ops").addEventListener("mouseleave", function () { focusStyle.textContent = ""; });
  }

  /* ---------- top nodes ---------- */

  function renderTable(run) {
    var kernelsOf = new Map();
    run.k.forEach(function (k) {
      if (k[K_NODE] < 0) return;
      var seen = kernelsOf.get(k[K_NODE]) || [0, 0];
      kernelsOf.set(k[K_NODE], [seen[0] + 1, seen[1] + k[K_DUR]]);
    });
    var perf = PERF.length && run.c.length ? PERF : [];
    var several = new Set(run.n.map(function (n) { return n[N_TID]; })).size > 1;
    var numeric = { "#": 1, "start": 1, "duration": 1, "% of run": 1, "GPU kernels": 1 };
    var head = ["#", "node", "op type", "provider"].concat(
      several ? ["thread"] : [], ["start", "duration", "% of run"],
      kernelsOf.size ? ["GPU kernels"] : []);
    $("top").tHead.innerHTML = "<tr>" + head.map(function (h) {
      return "<th" + (numeric[h] ? " class=\"num\"" : h === "node" ? " class=\"name\"" : "") + ">" +
        esc(h) + "</th>";
    }).join("") + perf.map(function (alias, at) {
      return "<th class=\"num perf\" title=\"perf counter over the node's window" + (PERF_NS[at] ?
        ": CPU time summed over every thread counted (the node's and ORT's pool threads, which " +
        "spin), so it can exceed the duration" : "") + "\">" + esc(alias) + "</th>";
    }).join("") + "<th class=\"shape\">inputs</th><th class=\"shape\">outputs</th></tr>";
    $("top").tBodies[0].innerHTML = run.top.map(function (i, rank) {
      var n = run.n[i];
      var cells = [
        "<td class=\"num\">" + (rank + 1) + "</td>",
        "<td class=\"name clip\" title=\"" + esc(S[n[N_NAME]]) + "\">" + esc(S[n[N_NAME]]) + "</td>",
        "<td><span class=\"swatch\" style=\"background:" + opColor(n[N_OP]) + "\"></span>" + esc(S[n[N_OP]]) + "</td>",
        "<td title=\"" + esc(S[n[N_PROV]]) + "\">" + esc(S[n[N_PROV]].replace(/ExecutionProvider$/, "")) + "</td>",
      ];
      if (several) cells.push("<td>" + esc(threadLabel(n[N_TID])) + "</td>");
      cells.push(
        "<td class=\"num\">+" + esc(fmtDur(n[N_TS])) + "</td>",
        "<td class=\"num\"><b>" + esc(fmtDur(n[N_DUR])) + "</b></td>",
        "<td class=\"num\">" + pct(n[N_DUR], run.dur) + "<span class=\"share\" style=\"width:" +
          Math.min(60, 60 * n[N_DUR] / (run.dur || 1)).toFixed(1) + "px\"></span></td>"
      );
      if (kernelsOf.size) {
        var k = kernelsOf.get(i);
        cells.push("<td class=\"num\">" + (k ? k[0] + " · " + esc(fmtDur(k[1])) : "–") + "</td>");
      }
      var counts = run.c[i];
      perf.forEach(function (alias, at) {
        cells.push("<td class=\"num perf\">" + esc(fmtPerf(counts ? counts[at] : null, at)) + "</td>");
      });
      cells.push(
        "<td class=\"shape clip\" title=\"" + esc(S[n[N_IN]]) + "\">" + esc(S[n[N_IN]] || "–") + "</td>",
        "<td class=\"shape clip\" title=\"" + esc(S[n[N_OUT]]) + "\">" + esc(S[n[N_OUT]] || "–") + "</td>"
      );
      return "<tr data-i=\"" + i + "\">" + cells.join("") + "</tr>";
    }).join("");
    $("top-title").innerHTML = "Top " + run.top.length + " nodes by duration <span class=\"hint\">" +
      "of run " + run.i + (perf.length ? " · perf counters per node" : "") + " · click: show in the timeline</span>";
  }

  function installTableEvents() {
    $("top").tBodies[0].addEventListener("click", function (e) {
      var tr = e.target.closest("tr");
      if (!tr) return;
      var i = +tr.getAttribute("data-i"), n = state.run.n[i];
      var pad = Math.max(n[N_DUR] * 4, (state.extent[1] - state.extent[0]) * 0.01);
      state.sel = i;
      setView(n[N_TS] - pad, n[N_TS] + n[N_DUR] + pad, true);
      $("timeline").scrollIntoView({ block: "nearest" });
    });
  }

  /* ---------- a run ---------- */

  function render(pos) {
    var started = performance.now();
    state.pos = pos;
    state.run = D.runs[pos];
    state.sel = -1;
    hideTip();
    renderRunHeader(state.run);
    renderTimeline(state.run, true);
    renderOps(state.run);
    renderTable(state.run);
    document.body.dataset.run = String(state.run.i);
    document.body.dataset.renderMs = (performance.now() - started).toFixed(1);
  }

  try {
    renderPage();
    installTimelineEvents();
    installOpEvents();
    installTableEvents();
    var first = 0;
    D.runs.forEach(function (r, pos) { if (r.i === D.run) first = pos; });
    render(first);
    void document.body.offsetHeight; // lay out now: the marker below then follows a paint
    requestAnimationFrame(function () {
      setTimeout(function () { document.body.dataset.rendered = performance.now().toFixed(1); }, 0);
    });
  } catch (error) {
    var item = document.createElement("li");
    item.textContent = "The report could not be drawn: " + error;
    $("notes").appendChild(item);
    document.body.dataset.renderError = String(error);
    throw error;
  }
})();
