// The live viewer's one script (served from /static/live.js, so the page's policy can stay
// script-src 'self'). It follows the page's event stream and replaces the page's live part with
// each event's fragment: markup the server rendered with the same escaping templates as the page.
(function () {
  "use strict";
  window.__loadCount = (window.__loadCount || 0) + 1;
  var live = document.getElementById("live");
  var state = document.getElementById("live-state");
  if (!live || !live.dataset.events) {
    return;
  }
  var source = new EventSource(live.dataset.events);
  source.onopen = function () {
    state.textContent = "connected";
  };
  source.onerror = function () {
    // EventSource reconnects by itself; say so until it has.
    state.textContent = "reconnecting";
  };
  source.onmessage = function (event) {
    var data = JSON.parse(event.data);
    live.innerHTML = data.html;
    window.__updates = (window.__updates || 0) + 1;
    state.textContent = "updated " + new Date().toLocaleTimeString();
  };
})();
