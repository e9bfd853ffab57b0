// gmailrelay console: progressive enhancement only; every page works without it.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  // A decision needs a note: keep its buttons disabled until one is written.
  document.querySelectorAll("form.resolve").forEach(function (form) {
    var note = form.querySelector("textarea[name=note]");
    var buttons = form.querySelectorAll("button[name=action]");
    function sync() {
      var empty = note.value.trim() === "";
      buttons.forEach(function (b) { b.disabled = empty; });
    }
    note.addEventListener("input", sync);
    sync();
  });
});
