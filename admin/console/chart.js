// A small live line chart on a canvas: a window of the last points, one
// line per series, the scale from the largest value shown. Hand-written
// (about 80 lines) because the console only ever draws a few short lines;
// a charting library would be most of the console's weight.

export class LineChart {
  constructor(canvas, series, { points = 60, unit = '' } = {}) {
    this.canvas = canvas;
    this.series = series; // [{ name, color }]
    this.points = points;
    this.unit = unit;
    this.data = []; // [{ t, values: [] }]
    this.canvas.dataset.points = '0';
    this.draw();
  }

  // push adds the values of one moment (a second), one per series.
  push(t, values) {
    const last = this.data[this.data.length - 1];
    if (last && last.t === t) {
      last.values = values;
    } else {
      this.data.push({ t, values });
      if (this.data.length > this.points) this.data.shift();
    }
    this.canvas.dataset.points = String(this.data.length);
    this.canvas.dataset.last = values.join(',');
    this.draw();
  }

  draw() {
    const c = this.canvas;
    const ratio = window.devicePixelRatio || 1;
    const w = c.clientWidth || 600;
    const h = c.clientHeight || 180;
    c.width = w * ratio;
    c.height = h * ratio;
    const g = c.getContext('2d');
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    g.clearRect(0, 0, w, h);
    const left = 48, right = 8, top = 18, bottom = 18;
    let max = 0;
    for (const d of this.data) for (const v of d.values) max = Math.max(max, v || 0);
    max = max > 0 ? max * 1.15 : 1;
    g.strokeStyle = '#d9dde5';
    g.fillStyle = '#667085';
    g.font = '11px system-ui, sans-serif';
    g.lineWidth = 1;
    for (let i = 0; i <= 2; i++) {
      const y = top + (h - top - bottom) * (i / 2);
      g.beginPath(); g.moveTo(left, y); g.lineTo(w - right, y); g.stroke();
      g.fillText(format(max * (1 - i / 2)) + this.unit, 2, y + 4);
    }
    const step = (w - left - right) / Math.max(1, this.points - 1);
    const x0 = w - right - step * (this.data.length - 1);
    this.series.forEach((s, si) => {
      g.strokeStyle = s.color;
      g.lineWidth = 1.8;
      g.beginPath();
      this.data.forEach((d, i) => {
        const y = top + (h - top - bottom) * (1 - (d.values[si] || 0) / max);
        if (i === 0) g.moveTo(x0 + i * step, y); else g.lineTo(x0 + i * step, y);
      });
      g.stroke();
      g.fillStyle = s.color;
      g.fillText(s.name, left + 8 + si * 90, 12);
    });
  }
}

function format(v) {
  if (v >= 100) return Math.round(v).toString();
  if (v >= 10) return v.toFixed(1);
  return v.toFixed(2);
}
