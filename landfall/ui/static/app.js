// The runs table updates while it is open: its rows are asked for again every few seconds (the server renders them,
// with the page's own filters) and swapped in, without a reload. A later page stays as it was read.
(function () {
  "use strict";
  var table = document.getElementById("runs-table");
  if (!table || !table.dataset.rowsUrl) { return; }
  var body = document.getElementById("runs-rows");
  var note = document.getElementById("updated");
  var every = Number(document.body.dataset.pollMs || 3000);
  function refresh() {
    fetch(table.dataset.rowsUrl, { headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        if (html !== body.innerHTML) { body.innerHTML = html; }
        note.textContent = "updated " + new Date().toLocaleTimeString();
      })
      .catch(function () { note.textContent = "could not update; retrying"; })
      .finally(function () { setTimeout(refresh, every); });
  }
  setTimeout(refresh, every);
})();
