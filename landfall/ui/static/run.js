// A run's page: the curves drawn by uPlot (vendor/uplot) from the data the server gives, and, while the run has not
// ended, its live sections (#run-facts, #run-head, #run-timeline, #run-plan, #run-links, #run-logs) and
// curves asked for again every few seconds.
(function () {
  "use strict";
  var live = document.getElementById("run-head");
  var holder = document.getElementById("curves");
  var empty = document.getElementById("curves-empty");
  var every = Number(document.body.dataset.pollMs || 3000);
  var colours = ["#0b5cad", "#b35900", "#116329", "#8250df", "#a40e26"];
  var plot = null;
  var shownLabels = "";

  function draw(curves) {
    var has = curves.data.length > 1 && curves.data[0].length > 0;
    empty.hidden = has;
    if (!has) { return; }
    var labels = curves.labels.join("|");
    if (plot && labels === shownLabels) { plot.setData(curves.data); return; }
    if (plot) { plot.destroy(); }
    shownLabels = labels;
    var series = [{ label: curves.x_label }];
    var axes = [{ label: curves.x_label }, { label: "loss", scale: "loss" }];
    var metricAxis = false;
    curves.labels.forEach(function (label, i) {
      var isLoss = /loss$/.test(label);
      if (!isLoss && !metricAxis) { axes.push({ label: "metric", scale: "metric", side: 1, grid: { show: false } }); metricAxis = true; }
      series.push({ label: label, stroke: colours[i % colours.length], width: 2, spanGaps: true,
                    scale: isLoss ? "loss" : "metric", points: { show: true, size: 5 } });
    });
    var width = Math.max(320, Math.min(holder.clientWidth || 900, 1100));
    plot = new uPlot({ width: width, height: 300, series: series, axes: axes,
                       scales: { x: { time: false } } }, curves.data, holder);
    holder.setAttribute("data-drawn", String(curves.data[0].length));
  }

  draw(JSON.parse(document.getElementById("curves-data").textContent));

  function poll() {
    fetch(live.dataset.liveUrl, { headers: { "Accept": "application/json" } })
      .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
      .then(function (answer) {
        Object.keys(answer.sections).forEach(function (name) {
          var holder = document.getElementById("run-" + name);
          if (holder) { holder.innerHTML = answer.sections[name]; }
        });
        draw(answer.curves);
        if (answer.open) { setTimeout(poll, every); }
      })
      .catch(function () { setTimeout(poll, every * 2); });
  }
  if (live.dataset.open === "true") { setTimeout(poll, every); }
})();
