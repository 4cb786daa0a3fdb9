// Strata's UI: the time slider, the live feed, the nodes' heat map. Served from the package
// (script-src 'self'): the pages run no inline script, and data reaches this file only through
// <script type="application/json"> blocks, which the browser parses as data, never runs.
"use strict";

(function () {
  let feed = null;
  let refreshing = false;
  let wanted = false;

  function versionQuery() {
    return document.body.dataset.live === "1" ? "" : "?v=" + encodeURIComponent(document.body.dataset.version);
  }

  function bindSlider() {
    const slider = document.getElementById("slider");
    const shown = document.getElementById("slider-value");
    if (!slider) return;
    slider.addEventListener("input", function () {
      shown.textContent = slider.value;
    });
    // a drag asks for one page, when it is let go
    slider.addEventListener("change", function () {
      slider.form.requestSubmit();
    });
  }

  function cellLayout(count, width) {
    const cell = Math.max(3, Math.min(24, Math.floor(Math.sqrt((width * 160) / Math.max(count, 1)))));
    const cols = Math.max(1, Math.floor(width / cell));
    return { cell: cell, cols: cols, rows: Math.ceil(count / cols) };
  }

  function colour(used, total, unschedulable) {
    if (unschedulable) return "#8a8a8a";
    if (!total) return used ? "#5b0f3a" : "#dfe7ef";
    const f = used / total;
    if (f > 1) return "#5b0f3a";
    const hue = Math.round(210 - 210 * f); // blue when idle, red when full
    return "hsl(" + hue + ", 70%, " + Math.round(70 - 25 * f) + "%)";
  }

  function drawHeat() {
    const canvas = document.getElementById("heat");
    const source = document.getElementById("heat-data");
    if (!canvas || !source) return;
    const heat = JSON.parse(source.textContent);
    const select = document.getElementById("heat-resource");
    const which = 1 + Number(select ? select.value : 0);
    const width = Math.max(canvas.parentElement.clientWidth - 2, 200);
    const layout = cellLayout(heat.rows.length, width);
    canvas.width = layout.cols * layout.cell;
    canvas.height = Math.max(layout.rows * layout.cell, layout.cell);
    const ctx = canvas.getContext("2d");
    heat.rows.forEach(function (row, i) {
      const pair = row[which];
      ctx.fillStyle = colour(pair[0], pair[1], row[row.length - 1]);
      const x = (i % layout.cols) * layout.cell;
      const y = Math.floor(i / layout.cols) * layout.cell;
      ctx.fillRect(x, y, layout.cell - (layout.cell > 4 ? 1 : 0), layout.cell - (layout.cell > 4 ? 1 : 0));
    });
    function at(event) {
      const box = canvas.getBoundingClientRect();
      const col = Math.floor(((event.clientX - box.left) * canvas.width) / box.width / layout.cell);
      const line = Math.floor(((event.clientY - box.top) * canvas.height) / box.height / layout.cell);
      const i = line * layout.cols + col;
      return col < layout.cols && i >= 0 && i < heat.rows.length ? heat.rows[i] : null;
    }
    canvas.onmousemove = function (event) {
      const row = at(event);
      const pair = row ? row[which] : null;
      canvas.title = row ? row[0] + ": " + pair[0] + " of " + pair[1] + " " + heat.resources[which - 1] : "";
    };
    canvas.onclick = function (event) {
      const row = at(event);
      if (row) window.location.href = "/node/" + encodeURIComponent(row[0]) + versionQuery();
    };
    if (select) select.onchange = drawHeat;
  }

  function bind() {
    bindSlider();
    drawHeat();
  }

  // Live mode: the server says when the log's end moves; the page fetches itself again and
  // swaps its content in (the same address, so the same version rules apply).
  function refresh() {
    if (refreshing) {
      wanted = true;
      return;
    }
    refreshing = true;
    fetch(window.location.href, { credentials: "same-origin", headers: { accept: "text/html" } })
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.text();
      })
      .then(function (text) {
        const fresh = new DOMParser().parseFromString(text, "text/html");
        const page = fresh.getElementById("page");
        if (!page || document.body.dataset.live !== "1") return;
        document.getElementById("page").replaceWith(document.adoptNode(page));
        document.title = fresh.title;
        document.body.dataset.version = fresh.body.dataset.version;
        bind();
      })
      .catch(function (error) {
        console.warn("strata: live refresh failed:", error.message);
      })
      .finally(function () {
        refreshing = false;
        if (wanted) {
          wanted = false;
          refresh();
        }
      });
  }

  function follow() {
    if (feed || !window.EventSource) return;
    feed = new EventSource("/api/events");
    feed.addEventListener("version", function (event) {
      const update = JSON.parse(event.data);
      if (String(update.version) !== document.body.dataset.version) refresh();
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    bind();
    if (document.body.dataset.live === "1") follow();
    window.addEventListener("resize", drawHeat);
  });
})();
