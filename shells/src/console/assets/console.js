// The agentsessions console's only script: follows the session page's
// journal while it is open (server-sent events). Rows arrive as HTML the
// server rendered and escaped; nothing here builds markup from data.
(function () {
  "use strict";
  var table = document.getElementById("timeline");
  if (!table || !table.dataset.events || !window.EventSource) {
    return;
  }
  var body = table.tBodies[0];
  var status = document.getElementById("live-status");
  var source = new EventSource(table.dataset.events);
  function text(id, value) {
    var el = document.getElementById(id);
    if (el) {
      el.textContent = value;
    }
  }
  source.addEventListener("open", function () {
    if (status) {
      status.textContent = "live";
    }
  });
  source.addEventListener("record", function (e) {
    var seq = "seq-" + e.lastEventId;
    if (document.getElementById(seq)) {
      return;
    }
    body.insertAdjacentHTML("beforeend", e.data);
    var row = document.getElementById(seq);
    if (row) {
      row.classList.add("fresh");
    }
  });
  source.addEventListener("head", function (e) {
    var head = JSON.parse(e.data);
    text("last-seq", String(head.last_seq));
    text("exec-state", head.exec);
    text("compute-state", head.compute);
    var state = document.getElementById("exec-state");
    if (state) {
      state.className = "state " + head.exec;
    }
    // A turn parked (or an approval was decided elsewhere): the card
    // comes from the server, so the page says so and offers a reload. It
    // does not reload by itself: that could cancel a decision being sent,
    // and a decision sent from an outdated card gets the stale answer.
    if ((head.pending ? "1" : "0") !== table.dataset.pending) {
      var changed = document.getElementById("changed");
      if (changed) {
        changed.hidden = false;
      }
    }
  });
  // The console session ended (logout, an expired or revoked token):
  // the server has stopped; reconnecting would only be refused.
  source.addEventListener("signedout", function () {
    source.close();
    if (status) {
      status.textContent = "signed out; reload to sign in";
    }
  });
  // A form on its way out needs no more updates.
  document.addEventListener("submit", function () {
    source.close();
  });
  source.addEventListener("error", function () {
    if (status) {
      status.textContent = "reconnecting…";
    }
  });
})();
