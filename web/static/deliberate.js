/* anges web chat: buttons that only a deliberate act presses (the approval cards' Approve, Always and Deny).

   A card can appear under the pointer (the chat scrolls to it) a moment after the person clicked the card before:
   the second click of a double-click, or a press begun before the card was there, must not answer it. So a guard
   keeps its buttons disabled until they have been on the screen, whole, in a focused window, for the read time
   (again after the window lost focus, or more of the card was opened), and then counts a click only when its press
   began on the button after that, came at least PRESS_GAP_MS after the press before it (anywhere on the page), and
   the page had not moved the button for PRESS_GAP_MS. A key counts when it was pressed on the button after that
   and is not a held key's repeat. Everything else is refused, and the card says why. */
"use strict";

(() => {
  const PRESS_GAP_MS = 500; // the usual double-click interval: a press this soon after another is its second click
  const STEADY_CHECK_MS = 100;
  let previousPress = -Infinity;
  let pressGap = Infinity; // since the press before the one being handled
  const guards = new Set();

  window.addEventListener("pointerdown", (event) => {
    pressGap = event.timeStamp - previousPress;
    previousPress = event.timeStamp;
  }, true);
  const updateAll = () => { for (const guard of guards) guard.update(); };
  window.addEventListener("focus", updateAll);
  window.addEventListener("blur", updateAll);
  document.addEventListener("visibilitychange", updateAll);

  class Guard {
    // `row`: the element that must be on the screen (the buttons); `onChange()` when `armed` changes; `refused(why)`
    // when a click or key is not taken.
    constructor(row, buttons, readMs, onChange, refused) {
      Object.assign(this, { row, buttons, readMs, onChange, refused });
      this.armed = false;
      this.armedAt = Infinity;
      this.inView = false;
      this.timer = null;
      this.press = null; // {button, ok, why}: the press (pointer or key) the next click belongs to
      this.rects = new Map();
      this.steadySince = performance.now();
      this.observer = new IntersectionObserver((entries) => {
        this.inView = entries[entries.length - 1].intersectionRatio >= 0.99;
        this.update();
      }, { threshold: [0, 0.99, 1] });
      this.observer.observe(row);
      this.steady = setInterval(() => this.moved(), STEADY_CHECK_MS);
      for (const button of buttons) this.watch(button);
      guards.add(this);
    }

    watch(button) {
      button.addEventListener("pointerdown", (event) => {
        this.moved();
        const now = event.timeStamp;
        const why = !this.armed || now < this.armedAt ? "it was pressed before the card could be read"
          : pressGap < PRESS_GAP_MS ? "it was the second press of a double-click"
            : now - this.steadySince < PRESS_GAP_MS ? "the button had just moved under the pointer" : "";
        this.press = { button, ok: !why, why };
      });
      button.addEventListener("keydown", (event) => {
        if (event.key !== "Enter" && event.key !== " ") return;
        const why = !this.armed ? "it was pressed before the card could be read"
          : event.repeat ? "it was a held key" : "";
        this.press = { button, ok: !why, why };
      });
    }

    // Whether the click `event` on `button` answers: see the top of this file.
    takes(button, event) {
      const press = this.press;
      this.press = null;
      if (!event.isTrusted) return false;
      let why = "";
      if (press && press.button === button) why = press.why;
      else if (event.detail !== 0) why = "its press began somewhere else"; // a pointer's click without its press here
      else if (!this.armed) why = "it came before the card could be read"; // a screen reader's click (no press)
      if (why) this.refused(why);
      return !why;
    }

    // Start the read time afresh (more of the card was opened: what it offers changed).
    restart() {
      this.disarm();
      this.update();
    }

    update() {
      const focused = document.visibilityState === "visible" && document.hasFocus();
      if (!focused) this.disarm(); // a click that brings the window back is not meant for the card
      else if (!this.inView && !this.armed) this.disarm(); // the reading was cut short
      else if (this.inView && !this.armed && this.timer === null) {
        this.timer = setTimeout(() => {
          this.timer = null;
          this.armed = true;
          this.armedAt = performance.now();
          this.onChange();
        }, this.readMs);
      }
    }

    disarm() {
      clearTimeout(this.timer);
      this.timer = null;
      if (!this.armed) return;
      this.armed = false;
      this.armedAt = Infinity;
      this.onChange();
    }

    // Whether the page moved a button (what is above it changed); scrolling does not count: the person does it.
    moved() {
      for (const button of this.buttons) {
        let left = 0, top = 0;
        for (let node = button; node; node = node.offsetParent) {
          left += node.offsetLeft;
          top += node.offsetTop;
        }
        const where = `${left},${top},${button.offsetWidth}`;
        if (this.rects.get(button) !== where) {
          this.rects.set(button, where);
          this.steadySince = performance.now();
        }
      }
    }

    // The card is answered, or gone: nothing to guard any more.
    stop() {
      this.disarm();
      this.observer.disconnect();
      clearInterval(this.steady);
      guards.delete(this);
    }
  }

  window.AngesDeliberate = { Guard };
})();
