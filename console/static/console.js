// gmailrelay console: progressive enhancement only; every page works without it.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  // A decision needs a note: keep its buttons disabled until one is written.
  // Once the form is submitted they stay disabled, so a double click sends
  // one decision (the server would refuse the second with a 409 page).
  document.querySelectorAll("form.resolve").forEach(function (form) {
    var note = form.querySelector("textarea[name=note]");
    var buttons = form.querySelectorAll("button[name=action]");
    var submitted = false;
    function sync() {
      var off = submitted || note.value.trim() === "";
      buttons.forEach(function (b) { b.disabled = off; });
    }
    note.addEventListener("input", sync);
    form.addEventListener("submit", function (ev) {
      if (submitted) {
        ev.preventDefault();
        return;
      }
      submitted = true;
      // Not now: the browser builds the form's data after this event, and
      // a disabled button would leave out which one was pressed (action).
      setTimeout(sync, 0);
    });
    // Back to this page from the history cache: the form may be sent again.
    window.addEventListener("pageshow", function (ev) {
      if (ev.persisted) {
        submitted = false;
        sync();
      }
    });
    sync();
  });
});
