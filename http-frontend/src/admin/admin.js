// The administration pages' only script, served by the binary (no inline script, nothing from
// elsewhere). An enhancement: every page works without it.
// - A form or button with data-confirm asks before a destructive action.
// - A table with data-live (a send's copies by state) refreshes its counts from the same
//   session's GET of the send, every two seconds, until the send is over.
"use strict";
document.addEventListener("submit", function (event) {
  var button = event.submitter;
  var text = (button && button.getAttribute("data-confirm")) || event.target.getAttribute("data-confirm");
  if (text && !window.confirm(text)) {
    event.preventDefault();
  }
});

function refresh(table) {
  var url = table.getAttribute("data-live");
  fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
    .then(function (r) { return r.ok ? r.json() : null; })
    .then(function (body) {
      if (!body || !body.data) { return; }
      var counts = body.data.counts || {};
      Object.keys(counts).forEach(function (state) {
        var cell = table.querySelector('[data-count="' + state + '"]');
        if (cell) { cell.textContent = String(counts[state]); }
      });
      var state = document.querySelector('[data-field="state"]');
      if (state) { state.textContent = body.data.state; }
      if (body.data.state !== "completed" && body.data.state !== "cancelled") {
        window.setTimeout(function () { refresh(table); }, 2000);
      }
    })
    .catch(function () { /* the page's own counts stay */ });
}

document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("table[data-live]").forEach(function (table) {
    window.setTimeout(function () { refresh(table); }, 1000);
  });
});
